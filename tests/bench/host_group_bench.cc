// host_group_bench: the rate of the collectives several hosts use (runtime/engine/
// host_group.h) over loopback: H processes (this one and H-1 children it starts), each
// call on a buffer of --mb MiB of fp32 (bf16 for the all-gather), the fastest of
// --rounds, for each count of TCP connections between two hosts (HostGroupOptions).
//   host_group_bench [--hosts=2] [--mb=256] [--rounds=3] [--connections=1,4] [--port=29650]
// Prints, per connection count, each host's bytes sent a second (1e9) in a reduce-scatter
// (an all-to-all of slices) and an all-gather (broadcasts).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "runtime/engine/host_group.h"
#include "runtime/engine/clock.h"
#include "tests/bench/bench_flags.h"

namespace slidedp {
namespace {

int Run(int rank, int hosts, int port, int64_t n, int rounds, const std::vector<int>& connection_counts) {
  at::Tensor grad = at::ones({n}, at::kFloat);
  at::Tensor out = at::empty({n}, at::kFloat);
  at::Tensor params = at::zeros({n}, at::kBFloat16);
  for (size_t i = 0; i < connection_counts.size(); ++i) {
    HostGroupOptions o;
    o.hosts = hosts;
    o.rank = rank;
    o.port = port + static_cast<int>(i);
    o.timeout_seconds = 300;
    o.connections = connection_counts[i];
    absl::StatusOr<std::unique_ptr<HostGroup>> g = HostGroup::Connect(o);
    if (!g.ok()) {
      std::fprintf(stderr, "host %d: %s\n", rank, std::string(g.status().message()).c_str());
      return 1;
    }
    for (bool reduce : {true, false}) {
      double best = 1e30;
      int64_t bytes = 0;
      for (int r = 0; r < rounds; ++r) {
        if (!(*g)->Barrier().ok()) return 1;
        const int64_t before = (*g)->bytes_sent();
        const double t0 = MonotonicSeconds();
        absl::Status s = reduce ? (*g)->ReduceScatter(grad, out) : (*g)->AllGather(params);
        const double t = MonotonicSeconds() - t0;
        if (!s.ok()) {
          std::fprintf(stderr, "host %d: %s\n", rank, std::string(s.message()).c_str());
          return 1;
        }
        if (t < best) best = t, bytes = (*g)->bytes_sent() - before;
      }
      if (rank == 0) {
        std::printf("hosts %d | connections %d | %s of %.0f MiB %s | %.3f s | %.3f GB sent | %.2f GB/s sent per host\n",
                    hosts, o.connections, reduce ? "reduce-scatter" : "all-gather", n * (reduce ? 4.0 : 2.0) / (1 << 20),
                    reduce ? "fp32" : "bf16", best, bytes / 1e9, bytes / best / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) {
  using slidedp::Flag;
  int hosts = 2, port = 29650, rounds = 3;
  double mb = 256;
  if (!absl::SimpleAtoi(Flag(argc, argv, "hosts", "2"), &hosts) || hosts < 2 ||
      !absl::SimpleAtoi(Flag(argc, argv, "port", "29650"), &port) ||
      !absl::SimpleAtoi(Flag(argc, argv, "rounds", "3"), &rounds) || rounds < 1 ||
      !absl::SimpleAtod(Flag(argc, argv, "mb", "256"), &mb) || mb <= 0) {
    std::fprintf(stderr, "usage: host_group_bench [--hosts=2] [--mb=256] [--rounds=3] [--connections=1,4] [--port=29650]\n");
    return 2;
  }
  std::vector<int> connections;
  for (absl::string_view s : absl::StrSplit(Flag(argc, argv, "connections", "1,4"), ',')) {
    int k = 0;
    if (!absl::SimpleAtoi(s, &k) || k < 1) {
      std::fprintf(stderr, "--connections: a list of counts >= 1\n");
      return 2;
    }
    connections.push_back(k);
  }
  const int64_t n = static_cast<int64_t>(mb * (1 << 20) / 4);
  std::vector<pid_t> children;
  for (int r = 1; r < hosts; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(slidedp::Run(r, hosts, port, n, rounds, connections));
    children.push_back(pid);
  }
  int rc = slidedp::Run(0, hosts, port, n, rounds, connections);
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
