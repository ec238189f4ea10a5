// Residency: see residency.h.
#include "runtime/plan/residency.h"

#include <algorithm>

#include "runtime/state/moment_codec.h"

namespace slidedp {

int64_t Residency::max_bytes() const {
  int64_t m = 0;
  for (int64_t b : bytes) m = std::max(m, b);
  return m;
}

int64_t ResidentUnitBytes(int64_t params, MomentDtype moments) {
  return params * 8 + MomentBytes(moments, params);
}

Residency PlaceResident(const std::vector<int64_t>& unit_params, int64_t n, int workers, MomentDtype moments) {
  Residency r;
  const int U = static_cast<int>(unit_params.size());
  r.units = std::clamp<int64_t>(n, 0, U);
  r.owner.assign(U, -1);
  r.bytes.assign(std::max(workers, 1), 0);
  for (int u = 0; u < r.units; ++u) {
    const int rank = static_cast<int>(std::min_element(r.bytes.begin(), r.bytes.end()) - r.bytes.begin());
    r.owner[u] = rank;
    r.bytes[rank] += ResidentUnitBytes(unit_params[u], moments);
  }
  return r;
}

int64_t ResidentUnitsWithin(const std::vector<int64_t>& unit_params, int workers, int64_t bytes_per_rank,
                            MomentDtype moments) {
  // Placement is greedy in unit order, so fitting is monotone in n.
  int64_t n = 0;
  while (n < static_cast<int64_t>(unit_params.size()) &&
         PlaceResident(unit_params, n + 1, workers, moments).max_bytes() <= bytes_per_rank) {
    ++n;
  }
  return n;
}

Staging PlaceStaged(const std::vector<int64_t>& unit_params, const Residency& resident, int64_t n, int workers,
                    int compute_bytes, MomentDtype moments, int64_t chunk_elems) {
  Staging s;
  const int U = static_cast<int>(unit_params.size());
  const int W = std::max(workers, 1);
  s.lane.assign(U, -1);
  int64_t largest = 0, placed = 0;
  for (int u = U - 1; u >= 0 && placed < n; --u) {
    if (resident.resident(u)) continue;
    s.lane[u] = static_cast<int>(placed % W);
    largest = std::max(largest, unit_params[u]);
    ++placed;
  }
  if (placed == 0) return s;
  const int64_t block = kMomentBlock;
  auto blocks = [&](int64_t e) { return (e + block - 1) / block * block; };
  s.chunk_elems = std::min(blocks(chunk_elems > 0 ? chunk_elems : kStagedChunkElems), blocks(largest));
  s.bytes_per_rank = 2 * (s.chunk_elems * (8 + compute_bytes) + MomentBytes(moments, s.chunk_elems));
  return s;
}

}  // namespace slidedp
