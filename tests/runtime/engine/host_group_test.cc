// HostGroup (issue 24) with 3 "hosts" as threads of this process over loopback (Gloo,
// c10d's TCPStore): the reduce-scatter gives each host its slice of the sum (fp32, or
// bf16 summed in fp32) for sizes that do not divide, slices of whole int8 blocks, the all-gather every slice, the all-reduce the sum; a host that
// never joins fails the rendezvous, and one that stops calling fails the others' next
// collective, each within the timeout, never a hang.
#include "runtime/engine/host_group.h"

#include <gtest/gtest.h>

#include "tests/free_port.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/state/host_shards.h"

namespace slidedp {
namespace {

using slidedp::testing::FreePort;

// Runs body(group) on `hosts` threads, one host each.
void OnHosts(int hosts, double timeout, const std::function<void(HostGroup&)>& body) {
  const int port = FreePort();
  std::vector<std::thread> threads;
  for (int r = 0; r < hosts; ++r) {
    threads.emplace_back([&, r] {
      HostGroupOptions o;
      o.port = port;
      o.hosts = hosts;
      o.rank = r;
      o.timeout_seconds = timeout;
      absl::StatusOr<std::unique_ptr<HostGroup>> g = HostGroup::Connect(o);
      ASSERT_TRUE(g.ok()) << g.status();
      body(**g);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(HostGroup, CollectivesOfThreeHosts) {
#ifndef SLIDEDP_WITH_GLOO
  GTEST_SKIP() << "a build without Gloo";
#endif
  const int H = 3;
  OnHosts(H, 30, [&](HostGroup& g) {
    // Slices of whole 256-element blocks: 1000 gives host 2 nothing, 2000 each a part.
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{2000}}) {
      // Host h holds in[i] = (h + 1) * i: the sum is 6 i.
      const at::Tensor in = at::arange(n, at::kFloat) * static_cast<float>(g.rank() + 1);
      const auto [b, e] = HostShardOf(n, H, g.rank());
      if (e > b) {
        EXPECT_EQ(b % kInt8MomentBlock, 0) << n;
      }
      at::Tensor out = at::full({std::max<int64_t>(e - b, 1)}, -1.0f);
      ASSERT_TRUE(g.ReduceScatter(in, out).ok());
      if (e > b) {
        EXPECT_TRUE(at::equal(out.narrow(0, 0, e - b), at::arange(b, e, at::kFloat) * 6.0f)) << n;
      }
      // Each host writes its own slice; the gather brings the others.
      at::Tensor buf = at::full({n}, -1.0f);
      if (e > b) buf.narrow(0, b, e - b).copy_(at::arange(b, e, at::kFloat));
      ASSERT_TRUE(g.AllGather(buf).ok());
      EXPECT_TRUE(at::equal(buf, at::arange(n, at::kFloat))) << n;
    }
    // bf16 travels as bytes, in slices of whole elements.
    at::Tensor b16 = at::full({5}, -1.0f).to(at::kBFloat16);
    const auto [b5, e5] = HostShardOf(5, H, g.rank());
    if (e5 > b5) b16.narrow(0, b5, e5 - b5).copy_(at::arange(b5, e5, at::kFloat).to(at::kBFloat16));
    ASSERT_TRUE(g.AllGather(b16).ok());
    EXPECT_TRUE(at::equal(b16, at::arange(5, at::kFloat).to(at::kBFloat16)));
    // A channel: a group of its own, collectives matched on it alone.
    absl::StatusOr<std::unique_ptr<HostGroup>> other = g.Channel("other");
    ASSERT_TRUE(other.ok()) << other.status();
    std::vector<double> w{2.0};
    ASSERT_TRUE((*other)->AllReduceSum(w).ok());
    EXPECT_EQ(w[0], 6.0);
    std::vector<double> v{1.0 * g.rank(), 0.5};
    ASSERT_TRUE(g.AllReduceSum(v).ok());
    EXPECT_EQ(v[0], 3.0);
    EXPECT_EQ(v[1], 1.5);
    EXPECT_TRUE(g.Barrier().ok());
  });
}

// The sum is ((s0 + s1) + s2) + s3 in fp32, whatever host computes it, also when the
// output is the host's own slice of the input (as the pipeline calls it: the gradient
// reduced in place), over repeated calls (the scratch kept between them) and in
// stripes over several connections (large exchanges, the all-gather too). Values
// whose sum depends on the order: 1e8, 1, -1e8, 1 give 1 in host order (0 + ... the
// other orders give 0 or 2).
TEST(HostGroup, ReduceScatterSumsInHostOrderInPlaceAndStripesLargeExchanges) {
#ifndef SLIDEDP_WITH_GLOO
  GTEST_SKIP() << "a build without Gloo";
#endif
  const int H = 4;
  const float term[H] = {1e8f, 1.0f, -1e8f, 1.0f};
  const float expected = ((term[0] + term[1]) + term[2]) + term[3];
  ASSERT_EQ(expected, 1.0f);
  OnHosts(H, 30, [&](HostGroup& g) {
    for (int round = 0; round < 2; ++round) {
      // 3M + 5 elements: 3 MiB slices, cut in stripes across the connections.
      for (const int64_t n : {int64_t{9}, int64_t{4000}, (int64_t{3} << 20) + 5}) {
        at::Tensor in = at::full({n}, term[g.rank()]);
        const auto [b, e] = HostShardOf(n, H, g.rank());
        ASSERT_TRUE(g.ReduceScatter(in, in.narrow(0, b, e - b)).ok());
        EXPECT_TRUE(at::equal(in.narrow(0, b, e - b), at::full({e - b}, expected))) << g.rank() << " " << n;
        // Elsewhere `in` is as it was.
        if (b > 0) {
          EXPECT_TRUE(at::equal(in.narrow(0, 0, b), at::full({b}, term[g.rank()])));
        }
      }
    }
    // bf16 (a gradient landed in the streamed copy) sums in fp32 and rounds once:
    // 256, 1, -256, 1 give 2 (bf16 partial sums would give 1: 257 rounds to 256).
    const float b16_term[H] = {256.0f, 1.0f, -256.0f, 1.0f};
    // 5M + 5 elements: 1.3M a slice, summed in two pieces of the fp32 accumulator.
    for (const int64_t n : {int64_t{9}, (int64_t{5} << 20) + 5}) {
      at::Tensor in = at::full({n}, b16_term[g.rank()]).to(at::kBFloat16);
      const auto [b, e] = HostShardOf(n, H, g.rank());
      ASSERT_TRUE(g.ReduceScatter(in, in.narrow(0, b, e - b)).ok());
      EXPECT_TRUE(at::equal(in.narrow(0, b, e - b), at::full({e - b}, 2.0f).to(at::kBFloat16))) << g.rank() << " " << n;
      if (b > 0) {
        EXPECT_TRUE(at::equal(in.narrow(0, 0, b), at::full({b}, b16_term[g.rank()]).to(at::kBFloat16)));
      }
    }
    // An all-gather of bf16 in stripes: 5M + 3 elements, 2.5 MiB slices.
    const int64_t n = (int64_t{5} << 20) + 3;
    const at::Tensor want = (at::arange(n, at::kFloat).remainder(251.0f)).to(at::kBFloat16);
    at::Tensor buf = at::zeros({n}, at::kBFloat16);
    const auto [b, e] = HostShardOf(n, H, g.rank());
    buf.narrow(0, b, e - b).copy_(want.narrow(0, b, e - b));
    ASSERT_TRUE(g.AllGather(buf).ok());
    EXPECT_TRUE(at::equal(buf, want));
  });
}

TEST(HostGroup, AHostThatNeverJoinsFailsTheRendezvousWithinTheTimeout) {
#ifndef SLIDEDP_WITH_GLOO
  GTEST_SKIP() << "a build without Gloo";
#endif
  HostGroupOptions o;
  o.port = FreePort();
  o.hosts = 2;
  o.rank = 0;
  o.timeout_seconds = 2;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<HostGroup>> g = HostGroup::Connect(o);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("rendezvous"), std::string::npos) << g.status();
  EXPECT_LT(waited, 20.0);
}

TEST(HostGroup, AHostThatStopsFailsTheOthersWithinTheTimeout) {
#ifndef SLIDEDP_WITH_GLOO
  GTEST_SKIP() << "a build without Gloo";
#endif
  OnHosts(3, 2, [&](HostGroup& g) {
    std::vector<double> v{1.0};
    ASSERT_TRUE(g.AllReduceSum(v).ok());
    if (g.rank() == 2) return;  // host 2 stops calling (and closes its group)
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = g.AllReduceSum(v);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;
    EXPECT_LT(waited, 20.0);
  });
}

}  // namespace
}  // namespace slidedp
