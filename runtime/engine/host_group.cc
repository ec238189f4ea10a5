// HostGroup over c10d's TCPStore and ProcessGroupGloo; see host_group.h. Compiled with
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
    const int64_t n = in.numel(), slice = SliceLength(n, H);
    try {
      // Every host sends slice r of its `in` to host r (padded to equal slices).
      at::Tensor send = at::zeros({slice * H}, in.options());
      send.narrow(0, 0, n).copy_(in);
      at::Tensor recv = at::empty({slice * H}, in.options());
      std::vector<int64_t> equal;
      pg_->alltoall_base(recv, send, equal, equal)->wait(Millis(options_.timeout_seconds));
      sent_ += slice * (H - 1) * in.element_size();  // a slice to each other host
      // recv holds every host's slice `rank`, in host order: sum them in that order.
      const auto [b, e] = SliceOf(n, H, options_.rank);
      if (e > b) {
        at::Tensor acc = out.narrow(0, 0, e - b);
        acc.copy_(recv.narrow(0, 0, e - b));
        for (int h = 1; h < H; ++h) acc.add_(recv.narrow(0, h * slice, e - b));
      }
    } catch (const std::exception& e) {
      return Failed("reduce-scatter", e);
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(at::Tensor buf) override {
    const int H = options_.hosts;
    const int64_t n = buf.numel(), slice = SliceLength(n, H), elem = buf.element_size();
    try {
      // As bytes (Gloo has no bf16), in slices of whole elements.
      const at::Tensor bytes = buf.view(at::kByte);
      at::Tensor padded = at::empty({slice * elem * H}, bytes.options());
      std::vector<std::vector<at::Tensor>> outs(1);
      for (int h = 0; h < H; ++h) outs[0].push_back(padded.narrow(0, h * slice * elem, slice * elem));
      const auto [b, e] = SliceOf(n, H, options_.rank);
      std::vector<at::Tensor> mine{at::zeros({slice * elem}, bytes.options())};
      if (e > b) mine[0].narrow(0, 0, (e - b) * elem).copy_(bytes.narrow(0, b * elem, (e - b) * elem));
      pg_->allgather(outs, mine)->wait(Millis(options_.timeout_seconds));
      sent_ += slice * elem * (H - 1);  // its slice to each other host
      bytes.copy_(padded.narrow(0, 0, n * elem));
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
