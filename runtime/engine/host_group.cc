// HostGroup over c10d's TCPStore and ProcessGroupGloo; see host_group.h. No staging
// copies of the buffers: the reduce-scatter sends straight from its input, the
// all-gather broadcasts views of its buffer (host memory traffic is the update's cost). Compiled with
// USE_C10D_GLOO where LibTorch's Gloo header builds (runtime/CMakeLists.txt).
#include "runtime/engine/host_group.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/engine/communicator.h"
#include "runtime/engine/exception_status.h"
#include "runtime/state/host_shards.h"

#ifdef SLIDEDP_WITH_GLOO
#include <list>
#include <utility>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace slidedp {

absl::StatusOr<bool> SameOnEveryHost(HostGroup& g, double mine) {
  std::vector<double> v{mine, mine * mine};
  if (absl::Status s = g.AllReduceSum(v); !s.ok()) return s;
  const double H = g.hosts();
  return v[0] == H * mine && v[1] == H * mine * mine;
}

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
  const std::string first = ExceptionMessage(e);
  if (first.find("imeout") != std::string::npos || first.find("imed out") != std::string::npos) {
    return absl::DeadlineExceededError(absl::StrCat("hosts: ", what, ": ", first));
  }
  return absl::UnavailableError(absl::StrCat("hosts: ", what, ": ", first));
}

// Elements of the fp32 accumulator that sums bf16 slices, a piece at a time.
constexpr int64_t kSumPiece = int64_t{1} << 20;

// Exchanges of at least this many bytes a stripe are cut across the connections.
constexpr int64_t kMinStripeBytes = int64_t{1} << 20;

// Stripe k of `count` elements [begin, begin + count) of `elem` bytes: as many stripes as
// the group has connections, each at least kMinStripeBytes (fewer for small spans); a
// function of the span alone, so that sender and receiver cut it alike.
std::vector<std::pair<int64_t, int64_t>> Stripes(int64_t begin, int64_t count, int64_t elem, int connections) {
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(connections, count * elem / kMinStripeBytes));
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < k; ++i) {
    const auto [b, e] = SliceOf(count, static_cast<int>(k), static_cast<int>(i));
    if (e > b) out.emplace_back(begin + b, e - b);
  }
  return out;
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
      // Point to point, all posted at once: host h's slice of `in` goes to host h, and
      // this host's slice comes from each other host into a scratch buffer kept between
      // calls (no page faults per call), in host order without this host. (Gloo's
      // all-to-all moved the same bytes at a sixth of the rate over loopback.)
      const int me = options_.rank;
      const auto [b, e] = HostShardOf(n, H, me);
      const int64_t m = e - b;
      const at::Tensor send = in.contiguous();
      if (!scratch_.defined() || scratch_.numel() < m * (H - 1) || scratch_.scalar_type() != in.scalar_type()) {
        scratch_ = at::empty({std::max<int64_t>(m * (H - 1), 1)}, in.options());
      }
      auto from = [&](int h) { return scratch_.narrow(0, (h < me ? h : h - 1) * m, m); };
      std::list<std::vector<at::Tensor>> bufs;  // each Work holds a reference to its vector
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (int h = 0; h < H; ++h) {
        if (h == me) continue;
        const auto [hb, he] = HostShardOf(n, H, h);
        // Stripe i on tag i: on connection i (c10d's Gloo picks a context by the tag).
        int tag = 0;
        for (const auto& [sb, sn] : Stripes(hb, he - hb, elem, options_.connections)) {
          bufs.push_back({send.narrow(0, sb, sn)});
          works.push_back(pg_->send(bufs.back(), h, tag++));
          sent_ += sn * elem;
        }
        tag = 0;
        for (const auto& [rb, rn] : Stripes(0, m, elem, options_.connections)) {
          bufs.push_back({from(h).narrow(0, rb, rn)});
          works.push_back(pg_->recv(bufs.back(), h, tag++));
        }
      }
      for (auto& w : works) w->wait(Millis(options_.timeout_seconds));
      // Summed in host order, ((s0 + s1) + s2) + ...: the same bits on every host
      // whatever the timing. `out` may be this host's slice of `in` itself: the hosts
      // before this one are summed in the scratch first, so that this host's term is
      // read before it is overwritten (each element reads, then writes, its own place).
      const at::Tensor own = send.narrow(0, b, m);
      if (m > 0 && in.scalar_type() != at::kFloat) {
        // bf16 (a gradient landed in the streamed copy): the same order in an fp32
        // accumulator of a piece at a time (kept between calls, 4 MiB), rounded once
        // into `out`.
        const int64_t piece = std::min<int64_t>(m, kSumPiece);
        if (!sum32_.defined() || sum32_.numel() < piece) sum32_ = at::empty({piece}, in.options().dtype(at::kFloat));
        for (int64_t pb = 0; pb < m; pb += piece) {
          const int64_t len = std::min(piece, m - pb);
          auto term = [&](int h) { return (h == me ? own : from(h)).narrow(0, pb, len); };
          at::Tensor acc = sum32_.narrow(0, 0, len);
          acc.copy_(term(0));
          for (int h = 1; h < H; ++h) acc.add_(term(h));
          out.narrow(0, pb, len).copy_(acc);
        }
      } else if (m > 0) {
        at::Tensor acc = out.narrow(0, 0, m);
        if (me == 0) {
          if (!acc.is_same(own)) acc.copy_(own);
        } else {
          at::Tensor before = from(0);
          for (int h = 1; h < me; ++h) before.add_(from(h));
          at::add_out(acc, before, own);
        }
        for (int h = me + 1; h < H; ++h) acc.add_(from(h));
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
      // `buf` to the others, in stripes, all posted at once (c10d's Gloo runs them on
      // its threads, over the connections in turn) and then waited for; no staging.
      const at::Tensor bytes = buf.view(at::kByte);
      std::list<std::vector<at::Tensor>> bufs;
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (int h = 0; h < H; ++h) {
        const auto [hb, he] = HostShardOf(n, H, h);
        for (const auto& [sb, sn] : Stripes(hb, he - hb, elem, options_.connections)) {
          bufs.push_back({bytes.narrow(0, sb * elem, sn * elem)});
          c10d::BroadcastOptions o;
          o.rootRank = h;
          works.push_back(pg_->broadcast(bufs.back(), o));
          if (h == options_.rank) sent_ += sn * elem * (H - 1);
        }
      }
      for (auto& w : works) w->wait(Millis(options_.timeout_seconds));
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
    // One device per connection: c10d's Gloo makes a context (a connection to every
    // other host) for each, and a thread to run its collectives.
    for (int c = 0; c < std::max(1, o.connections); ++c) {
      options->devices.push_back(local.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                               : c10d::ProcessGroupGloo::createDeviceForHostname(local));
    }
    options->threads = std::max(1, o.connections);
    return options;
  }

 private:
  const HostGroupOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  at::Tensor scratch_;  // ReduceScatter's slices from the other hosts (its caller's thread)
  at::Tensor sum32_;    // ReduceScatter's fp32 sum of bf16 slices (its caller's thread)
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
