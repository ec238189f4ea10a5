// HostGroup over c10d's TCPStore and ProcessGroupGloo; see host_group.h. No staging
// copies of the buffers: the reduce-scatter sends straight from its input, the
// all-gather broadcasts views of its buffer (host memory traffic is the update's cost). Compiled with
// USE_C10D_GLOO where LibTorch's Gloo header builds (runtime/CMakeLists.txt).
#include "runtime/engine/host_group.h"

#include "absl/strings/str_cat.h"
#include "runtime/engine/communicator.h"

#ifdef SLIDEDP_WITH_GLOO
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace slidedp {

#ifndef SLIDEDP_WITH_GLOO

absl::StatusOr<std::unique_ptr<HostGroup>> HostGroup::Connect(const HostGroupOptions&) {
  return absl::UnimplementedError(
      "several hosts: this build has no Gloo (LibTorch's c10d needs gloo's headers: apt install libgloo-dev, then "
      "rebuild)");
}

#else

namespace {

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// A c10d failure as a status: a timeout, or a peer gone.
absl::Status Failed(const std::string& what, const std::exception& e) {
  const std::string msg = e.what();
  const std::string first = msg.substr(0, msg.find('\n'));
  if (first.find("imeout") != std::string::npos || first.find("imed out") != std::string::npos) {
    return absl::DeadlineExceededError(absl::StrCat("hosts: ", what, ": ", first));
  }
  return absl::UnavailableError(absl::StrCat("hosts: ", what, ": ", first));
}

class GlooHostGroup final : public HostGroup {
 public:
  GlooHostGroup(const HostGroupOptions& o, c10::intrusive_ptr<c10d::Store> store,
                c10::intrusive_ptr<c10d::ProcessGroupGloo> pg)
      : options_(o), store_(std::move(store)), pg_(std::move(pg)) {}

  int hosts() const override { return options_.hosts; }
  int rank() const override { return options_.rank; }

  absl::Status ReduceScatter(const at::Tensor& in, at::Tensor out) override {
    const int H = options_.hosts;
    const int64_t n = in.numel(), elem = in.element_size();
    try {
      // An all-to-all straight from `in`: host h gets its slice from every host (no
      // staging copy of `in`, no padding: split sizes), into `recv` in host order.
      std::vector<int64_t> send_splits, recv_splits;
      const auto [b, e] = SliceOf(n, H, options_.rank);
      for (int h = 0; h < H; ++h) {
        const auto [hb, he] = SliceOf(n, H, h);
        send_splits.push_back(he - hb);
        recv_splits.push_back(e - b);
        if (h != options_.rank) sent_ += (he - hb) * elem;
      }
      at::Tensor send = in.contiguous();
      at::Tensor recv = at::empty({(e - b) * H}, in.options());
      pg_->alltoall_base(recv, send, recv_splits, send_splits)->wait(Millis(options_.timeout_seconds));
      // Summed in host order: the same bits on every host whatever the timing.
      if (e > b) {
        at::Tensor acc = out.narrow(0, 0, e - b);
        acc.copy_(recv.narrow(0, 0, e - b));
        for (int h = 1; h < H; ++h) acc.add_(recv.narrow(0, h * (e - b), e - b));
      }
    } catch (const std::exception& e) {
      return Failed("reduce-scatter", e);
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(at::Tensor buf) override {
    const int H = options_.hosts;
    const int64_t n = buf.numel(), elem = buf.element_size();
    try {
      // In place, as bytes (Gloo has no bf16): each host broadcasts its own slice of
      // `buf` to the others, H broadcasts of views, no staging buffer.
      const at::Tensor bytes = buf.view(at::kByte);
      for (int h = 0; h < H; ++h) {
        const auto [hb, he] = SliceOf(n, H, h);
        if (he <= hb) continue;  // the same on every host
        std::vector<at::Tensor> slice{bytes.narrow(0, hb * elem, (he - hb) * elem)};
        c10d::BroadcastOptions o;
        o.rootRank = h;
        pg_->broadcast(slice, o)->wait(Millis(options_.timeout_seconds));
        if (h == options_.rank) sent_ += (he - hb) * elem * (H - 1);
      }
    } catch (const std::exception& e) {
      return Failed("all-gather", e);
    }
    return absl::OkStatus();
  }

  absl::Status AllReduceSum(std::vector<double>& values) override {
    if (values.empty()) return absl::OkStatus();
    try {
      std::vector<at::Tensor> t{at::tensor(values, at::TensorOptions().dtype(at::kDouble))};
      pg_->allreduce(t)->wait(Millis(options_.timeout_seconds));
      sent_ += static_cast<int64_t>(values.size() * sizeof(double));
      for (size_t i = 0; i < values.size(); ++i) values[i] = t[0][static_cast<int64_t>(i)].item<double>();
    } catch (const std::exception& e) {
      return Failed("all-reduce", e);
    }
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    try {
      pg_->barrier()->wait(Millis(options_.timeout_seconds));
    } catch (const std::exception& e) {
      return Failed("barrier", e);
    }
    return absl::OkStatus();
  }

  int64_t bytes_sent() const override { return sent_.load(); }

  absl::StatusOr<std::unique_ptr<HostGroup>> Channel(const std::string& name) override {
    try {
      auto store = c10::make_intrusive<c10d::PrefixStore>(name, store_);
      auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, options_.rank, options_.hosts, Options(options_));
      return std::unique_ptr<HostGroup>(new GlooHostGroup(options_, store, std::move(pg)));
    } catch (const std::exception& e) {
      return Failed(absl::StrCat("opening channel '", name, "'"), e);
    }
  }

  // The Gloo options of a group of these hosts.
  static c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> Options(const HostGroupOptions& o) {
    auto options = c10d::ProcessGroupGloo::Options::create(Millis(o.timeout_seconds));
    const std::string local = !o.local_address.empty() ? o.local_address
                              : (o.address == "127.0.0.1" || o.address == "localhost") ? "127.0.0.1"
                                                                                         : "";
    options->devices.push_back(local.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                             : c10d::ProcessGroupGloo::createDeviceForHostname(local));
    return options;
  }

 private:
  const HostGroupOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::atomic<int64_t> sent_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<HostGroup>> HostGroup::Connect(const HostGroupOptions& o) {
  if (o.hosts < 1 || o.rank < 0 || o.rank >= o.hosts) {
    return absl::InvalidArgumentError(absl::StrCat("hosts: rank ", o.rank, " of ", o.hosts, " hosts"));
  }
  if (o.port < 1 || o.port > 65535) return absl::InvalidArgumentError(absl::StrCat("hosts: port ", o.port));
  const std::string where = absl::StrCat(o.address, ":", o.port);
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.port);
    so.isServer = o.rank == 0;
    so.numWorkers = static_cast<size_t>(o.hosts);
    so.waitWorkers = true;
    so.timeout = Millis(o.timeout_seconds);
    auto store = c10::make_intrusive<c10d::TCPStore>(o.address, so);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.hosts, GlooHostGroup::Options(o));
    return std::unique_ptr<HostGroup>(new GlooHostGroup(o, std::move(store), std::move(pg)));
  } catch (const std::exception& e) {
    return Failed(absl::StrCat("rendezvous at ", where, " as host ", o.rank, " of ", o.hosts), e);
  }
}

#endif  // SLIDEDP_WITH_GLOO

}  // namespace slidedp
