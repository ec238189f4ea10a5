// AdamW on a GPU: the host side (the scalars); the kernel is adamw_device.cu.
#include "runtime/state/adamw_device.h"

#include "runtime/state/adamw_kernels.h"

namespace slidedp {

AdamWDeviceCoeffs DeviceCoeffs(const AdamWHyper& h) { return adamw_internal::MakeCoeffs(h); }

}  // namespace slidedp
