// AdamW on a GPU: the host side (the scalars); the kernel is adamw_device.cu.
#include "runtime/state/adamw_device.h"

#include "runtime/state/adamw_kernels.h"

namespace slidedp {

AdamWDeviceCoeffs DeviceCoeffs(const AdamWHyper& h) {
  const adamw_internal::Coeffs c = adamw_internal::MakeCoeffs(h);
  return AdamWDeviceCoeffs{c.grad_scale, c.decay,      c.beta1, c.one_minus_beta1, c.beta2,
                           c.one_minus_beta2, c.bias2_sqrt, c.eps, c.neg_step_size};
}

}  // namespace slidedp
