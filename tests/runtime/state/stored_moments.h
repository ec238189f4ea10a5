// Tests of the stored AdamW moments: m and v of n elements as optimizer.state_dtype keeps
// them in host memory (and the 8-bit blocks' scales), in vectors of their own, with a
// MomentView of them. Tests only.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/state/moment_codec.h"

namespace slidedp::testing {

struct StoredMoments {
  MomentDtype dtype;
  std::vector<uint8_t> m, v;
  std::vector<float> ms, vs;  // int8: one scale per block of kMomentBlock; otherwise unused
  StoredMoments(MomentDtype d, int64_t n) : dtype(d) {
    const int64_t width = MomentWidth(d);
    m.assign(n * width, 0);
    v.assign(n * width, 0);
    ms.assign((n + kMomentBlock - 1) / kMomentBlock, 0.0f);
    vs.assign(ms.size(), 0.0f);
  }
  MomentView view() {
    MomentView mv;
    mv.dtype = dtype;
    mv.m = m.data();
    mv.v = v.data();
    if (dtype == MomentDtype::kInt8) {
      mv.m_scale = ms.data();
      mv.v_scale = vs.data();
    }
    return mv;
  }
  bool operator==(const StoredMoments& o) const { return m == o.m && v == o.v && ms == o.ms && vs == o.vs; }
};

}  // namespace slidedp::testing
