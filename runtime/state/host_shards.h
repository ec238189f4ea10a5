// How a unit's elements are split between the hosts of a job (issue 24): the one rule
// that the host state (which slice of the master, m and v a host keeps), the host group's
// reduce-scatter and all-gather (runtime/engine/host_group.h) and the step model's
// exchange bytes (runtime/plan/step_replay.h) all follow. Pure functions, any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "runtime/train_config.h"

namespace slidedp {

// Slices start on whole 8-bit moment blocks, so that no block of int8 moments (one
// scale per kInt8MomentBlock elements) straddles two hosts and a host's blocks are the
// one host's blocks: ceil(numel / hosts) rounded up to a multiple of the block. Host 0's
// slice is the largest; the last ones are short or empty (a unit of fewer than a block
// per host lies on the first hosts). One host: the whole unit.
inline int64_t HostShardLength(int64_t numel, int hosts) {
  const int64_t even = (numel + hosts - 1) / hosts;
  return (even + kInt8MomentBlock - 1) / kInt8MomentBlock * kInt8MomentBlock;
}

// Elements [begin, end) of a unit of `numel` that host `host` of `hosts` holds.
inline std::pair<int64_t, int64_t> HostShardOf(int64_t numel, int hosts, int host) {
  if (hosts <= 1) return {0, numel};
  const int64_t len = HostShardLength(numel, hosts);
  const int64_t b = std::min(numel, host * len);
  return {b, std::min(numel, b + len)};
}

}  // namespace slidedp
