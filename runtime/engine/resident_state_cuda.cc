// ResidentState's GPU update (resident_state.h): launches the AdamW kernel of
// runtime/state/adamw_device.h on the current stream, one launch per parameter range
// (each with its weight decay). Built only with a CUDA-enabled LibTorch; the calling
// thread's current stream is the resident state's update stream (StreamUse).
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "runtime/engine/resident_state.h"
#include "runtime/state/adamw_device.h"

namespace slidedp {

void RunDeviceAdamW(const at::Tensor& master, const AdamWHyper& h, const std::vector<float>& decay,
                    const std::vector<std::pair<int64_t, int64_t>>& spans, const at::Tensor& grad,
                    const at::Tensor& m, const at::Tensor& v, const at::Tensor& params) {
  TORCH_CHECK(params.scalar_type() == at::kBFloat16 || params.scalar_type() == at::kFloat,
              "resident AdamW: the compute copy must be bf16 or fp32");
  const bool bf16 = params.scalar_type() == at::kBFloat16;
  void* stream = c10::cuda::getCurrentCUDAStream(master.device().index()).stream();
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto [offset, n] = spans[i];
    AdamWHyper hp = h;
    hp.weight_decay = decay[i];
    char* out = static_cast<char*>(params.data_ptr()) + offset * params.element_size();
    const AdamWDeviceArgs a{master.data_ptr<float>() + offset, grad.data_ptr<float>() + offset,
                            m.data_ptr<float>() + offset, v.data_ptr<float>() + offset, out, bf16, n};
    const std::string failed = LaunchAdamW(DeviceCoeffs(hp), a, stream);
    TORCH_CHECK(failed.empty(), __FILE__, ":", __LINE__, ": ", failed);
  }
}

}  // namespace slidedp
