// AdamW on a GPU: the host side (the scalars, the span table); the kernels are
// adamw_device.cu.
#include "runtime/state/adamw_device.h"

#include "runtime/state/adamw_kernels.h"

namespace slidedp {

AdamWDeviceCoeffs DeviceCoeffs(const AdamWHyper& h) { return adamw_internal::MakeCoeffs(h); }

bool SetDecaySpans(const AdamWHyper& h, const std::vector<DecaySpan>& spans, AdamWStoredDeviceArgs* a) {
  if (spans.size() > static_cast<size_t>(kMaxDeviceSpans)) return false;
  a->spans = static_cast<int>(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    AdamWHyper hs = h;
    hs.weight_decay = spans[i].weight_decay;
    a->span_end[i] = spans[i].end;
    a->span_decay[i] = adamw_internal::MakeCoeffs(hs).decay;
  }
  return true;
}

}  // namespace slidedp
