// ResidentState's GPU update (resident_state.h): launches the AdamW kernels of
// runtime/state/adamw_device.h on the current stream: with fp32 moments one launch per
// parameter range (each with its weight decay), with bf16 or 8-bit moments one over the
// unit with the ranges' decays in its table (an 8-bit block may span two ranges). Built
// only with a CUDA-enabled LibTorch; the calling thread's current stream is the resident
// state's update stream (StreamUse).
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "runtime/engine/resident_state.h"
#include "runtime/state/adamw_device.h"

namespace slidedp {

void RunDeviceAdamW(const UnitState& s, const AdamWHyper& h, const std::vector<DecaySpan>& spans,
                    int64_t first_index, const at::Tensor& out) {
  void* stream = c10::cuda::getCurrentCUDAStream(s.master.device().index()).stream();
  // A resident unit writes no parameters (the worker casts the master into a slot when
  // it uses the unit); a staged chunk writes the streamed copy's.
  TORCH_CHECK(!out.defined() || out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kFloat,
              "device AdamW: the parameters out must be bf16 or fp32");
  const bool bf16 = out.defined() && out.scalar_type() == at::kBFloat16;
  char* out_base = out.defined() ? static_cast<char*>(out.data_ptr()) : nullptr;
  const int64_t out_size = out.defined() ? out.element_size() : 0;
  if (s.m.scalar_type() == at::kFloat) {
    for (const DecaySpan& span : spans) {
      AdamWHyper hp = h;
      hp.weight_decay = span.weight_decay;
      const int64_t b = span.begin;
      const AdamWDeviceArgs a{s.master.data_ptr<float>() + b, s.grad.data_ptr<float>() + b,
                              s.m.data_ptr<float>() + b, s.v.data_ptr<float>() + b,
                              out_base != nullptr ? out_base + b * out_size : nullptr, bf16, span.end - b};
      const std::string failed = LaunchAdamW(DeviceCoeffs(hp), a, stream);
      TORCH_CHECK(failed.empty(), __FILE__, ":", __LINE__, ": ", failed);
    }
    return;
  }
  // Stored moments: one launch over the unit, each parameter range's decay in its table.
  const bool int8 = s.m.scalar_type() == at::kChar;
  TORCH_CHECK(int8 || s.m.scalar_type() == at::kBFloat16, "resident AdamW: moments must be float, bfloat16 or int8");
  TORCH_CHECK(!int8 || (s.m_scale.defined() && s.v_scale.defined()), "resident AdamW: 8-bit moments without scales");
  AdamWStoredDeviceArgs a{};
  TORCH_CHECK(SetDecaySpans(h, spans, &a), "resident AdamW: ", spans.size(), " parameter ranges, the kernel takes ",
              kMaxDeviceSpans);
  const MomentView mv = MomentsOf(int8 ? MomentDtype::kInt8 : MomentDtype::kBf16, s);
  a.param = s.master.data_ptr<float>();
  a.grad = s.grad.data_ptr<float>();
  a.dtype = mv.dtype;
  a.m = mv.m;
  a.v = mv.v;
  a.m_scale = mv.m_scale;
  a.v_scale = mv.v_scale;
  a.out = out_base;
  a.out_bf16 = bf16;
  a.n = s.master.numel();
  a.step = h.step;
  a.first = first_index;
  const std::string failed = LaunchAdamWStored(DeviceCoeffs(h), a, stream);
  TORCH_CHECK(failed.empty(), __FILE__, ":", __LINE__, ": ", failed);
}

}  // namespace slidedp
