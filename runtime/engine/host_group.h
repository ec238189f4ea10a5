// HostGroup: the hosts of one job (policy: several hosts, issue 24) as one c10d process
// group over Gloo, PyTorch's distributed engine: a TCPStore rendezvous at
// address:port (host 0 serves it), then the collectives the sharded host state needs on
// host buffers. Reduce-scatter is point-to-point sends of the slices and a sum in host
// order (Gloo has no reduce-scatter, and its all-to-all ran at a sixth of the rate), so
// that every host gets the same bits whatever the timing; all-gather is broadcasts of
// each host's slice, in place. Large exchanges are cut in stripes across several TCP
// connections (HostGroupOptions::connections). A peer that dies or stops answering fails every call within the timeout
// (UNAVAILABLE or DEADLINE_EXCEEDED naming the operation), never a hang.
// Threads: one caller at a time per group (Channel gives a thread a group of its own),
// the same calls in the same order on every host.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace slidedp {

struct HostGroupOptions {
  std::string address = "127.0.0.1";  // host 0's address: its TCPStore and this host's Gloo device
  int port = 29500;                    // the TCPStore's port on host 0
  int hosts = 1;
  int rank = 0;
  std::string local_address;           // the address this host's Gloo device binds; empty: the one
                                       // that reaches `address` (127.0.0.1 for a loopback rendezvous)
  double timeout_seconds = 60.0;       // rendezvous and every collective
  // TCP connections between each pair of hosts (Gloo devices): exchanges of more than
  // a MiB a stripe are cut across them, so that one connection's thread does not cap
  // the rate (over loopback, one moved about 1 GB/s).
  int connections = 4;
};

class HostGroup {
 public:
  // Connects to the others (blocks until all `hosts` have joined, or the timeout).
  // UNIMPLEMENTED in a build without Gloo (LibTorch's c10d needs libgloo-dev's headers).
  static absl::StatusOr<std::unique_ptr<HostGroup>> Connect(const HostGroupOptions& options);
  virtual ~HostGroup() = default;

  virtual int hosts() const = 0;
  virtual int rank() const = 0;

  // `in`: [n] fp32 or bf16 on every host; `out`: this host's slice of the sum,
  // HostShardOf(n, hosts, rank) (runtime/state/host_shards.h), in `in`'s dtype, summed
  // in host order in fp32 (bf16: rounded once at the end). `out` may be that slice of
  // `in` itself.
  virtual absl::Status ReduceScatter(const at::Tensor& in, at::Tensor out) = 0;
  // `buf`: [n] on every host, each holding its own HostShardOf slice; on return every
  // host holds all.
  virtual absl::Status AllGather(at::Tensor buf) = 0;
  // Element-wise sum of `values` over the hosts, the same on every host.
  virtual absl::Status AllReduceSum(std::vector<double>& values) = 0;
  virtual absl::Status Barrier() = 0;

  // Bytes this host has sent to the others through this group so far (payload: its
  // slices of reduce-scatters and all-gathers, all-reduce values), any thread.
  virtual int64_t bytes_sent() const = 0;

  // Another group of the same hosts with collectives of its own, for another thread:
  // collectives of one group are matched in the order each host issues them, so each
  // thread that talks to the other hosts gets its own group. Every host calls Channel
  // with the same names in the same order.
  virtual absl::StatusOr<std::unique_ptr<HostGroup>> Channel(const std::string& name) = 0;
};

// Whether every host of `g` passed the same `mine` (all hosts call it together): the
// sums over the hosts of the values and of their squares are H x and H x^2 only when
// all are x. A host that failed its part passes a value no other can (say -1).
absl::StatusOr<bool> SameOnEveryHost(HostGroup& g, double mine);

}  // namespace slidedp
