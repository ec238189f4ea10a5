// ResidentState's GPU update (resident_state.h): launches the AdamW kernels of
// runtime/state/adamw_device.h on the current stream: with fp32 moments one launch per
// parameter range (each with its weight decay), with bf16 or 8-bit moments one over the
// unit with the ranges' decays in its table (an 8-bit block may span two ranges). Built only with a CUDA-enabled LibTorch; the calling
// thread's current stream is the resident state's update stream (StreamUse).
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "runtime/engine/resident_state.h"
#include "runtime/state/adamw_device.h"

namespace slidedp {

void RunDeviceAdamW(const at::Tensor& master, const AdamWHyper& h, const std::vector<float>& decay,
                    const std::vector<std::pair<int64_t, int64_t>>& spans, const at::Tensor& grad,
                    const at::Tensor& m, const at::Tensor& v, const at::Tensor& m_scale, const at::Tensor& v_scale,
                    const at::Tensor& params) {
  TORCH_CHECK(params.scalar_type() == at::kBFloat16 || params.scalar_type() == at::kFloat,
              "resident AdamW: the compute copy must be bf16 or fp32");
  const bool bf16 = params.scalar_type() == at::kBFloat16;
  void* stream = c10::cuda::getCurrentCUDAStream(master.device().index()).stream();
  if (m.scalar_type() == at::kFloat) {
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
    return;
  }
  // Stored moments: one launch over the unit, each parameter range's decay in its table.
  const bool int8 = m.scalar_type() == at::kChar;
  TORCH_CHECK(int8 || m.scalar_type() == at::kBFloat16, "resident AdamW: moments must be float, bfloat16 or int8");
  TORCH_CHECK(!int8 || (m_scale.defined() && v_scale.defined()), "resident AdamW: 8-bit moments without scales");
  std::vector<DecaySpan> ranges;
  for (size_t i = 0; i < spans.size(); ++i) ranges.push_back({spans[i].first, spans[i].first + spans[i].second, decay[i]});
  AdamWStoredDeviceArgs a{};
  TORCH_CHECK(SetDecaySpans(h, ranges, &a), "resident AdamW: ", spans.size(), " parameter ranges, the kernel takes ",
              kMaxDeviceSpans);
  a.param = master.data_ptr<float>();
  a.grad = grad.data_ptr<float>();
  a.dtype = int8 ? MomentDtype::kInt8 : MomentDtype::kBf16;
  a.m = m.data_ptr();
  a.v = v.data_ptr();
  a.m_scale = int8 ? m_scale.data_ptr<float>() : nullptr;
  a.v_scale = int8 ? v_scale.data_ptr<float>() : nullptr;
  a.out = params.data_ptr();
  a.out_bf16 = bf16;
  a.n = master.numel();
  a.step = h.step;
  const std::string failed = LaunchAdamWStored(DeviceCoeffs(h), a, stream);
  TORCH_CHECK(failed.empty(), __FILE__, ":", __LINE__, ": ", failed);
}

}  // namespace slidedp
