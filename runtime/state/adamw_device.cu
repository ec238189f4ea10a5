// The GPU AdamW kernels of adamw_device.h, launched on the caller's stream without
// synchronization. Every element follows AdamWElement (adamw_kernels.h) op for op with
// explicitly rounded intrinsics (__fmul_rn and friends are never contracted into fused
// multiply-adds); the stored moments' codes are moment_codes.h's, the CPU's own.
// - fp32 moments: a grid-stride loop, one element per thread per iteration.
// - bf16 moments: the same, each moment widened before and rounded (nearest even) after.
// - 8-bit moments: one thread block per quantization block (kMomentBlock threads, a
//   grid-stride loop over blocks): each thread decodes and updates its element, the
//   block's new scales (the largest |m| and v) come from a reduction (warp shuffles,
//   then shared memory; a maximum, so its order changes nothing), then each thread
//   encodes its element with its index's random bits.
// With SLIDEDP_CUDA_EMULATION defined (tests/runtime/model/cuda_emulation.h) this file
// compiles as C++ for the tests that run its kernels on the CPU; the launches are left out.
#if !defined(SLIDEDP_CUDA_EMULATION)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

#include "runtime/state/adamw_device.h"
#include "runtime/state/moment_codes.h"

namespace slidedp {
// The tests' CPU copy of the kernels has a namespace of its own: a GPU build links the
// library's too.
#if defined(SLIDEDP_CUDA_EMULATION)
namespace device_adamw_emulated {
#else
namespace device_adamw {
#endif

namespace mc = ::slidedp::moment_codes;

// AdamWElement with the explicitly rounded intrinsics, `decay` for the element's range:
// the new parameter returned, m and v updated, sqrt of the new v in `root`.
__device__ __forceinline__ float Step(const AdamWDeviceCoeffs& c, float decay, float p, float g_raw, float& m,
                                      float& v, float& root) {
  const float g = __fmul_rn(c.grad_scale, g_raw);
  const float decayed = __fmul_rn(p, decay);
  m = __fmaf_rn(g, c.one_minus_beta1, __fmul_rn(c.beta1, m));
  v = __fmaf_rn(__fmul_rn(c.one_minus_beta2, g), g, __fmul_rn(c.beta2, v));
  root = __fsqrt_rn(v);
  const float denom = __fadd_rn(__fdiv_rn(root, c.bias2_sqrt), c.eps);
  return __fadd_rn(decayed, __fdiv_rn(__fmul_rn(c.neg_step_size, m), denom));
}

__device__ __forceinline__ void WriteOut(void* out, bool out_bf16, int64_t i, float p) {
  if (out == nullptr) return;  // no parameters out (a resident unit: resident_state.h)
  if (out_bf16) {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(p);
  } else {
    static_cast<float*>(out)[i] = p;
  }
}

// The decay of element i: its span's (ends ascending, the last at n).
__device__ __forceinline__ float DecayAt(const AdamWStoredDeviceArgs& a, int64_t i) {
  int s = 0;
  while (s + 1 < a.spans && i >= a.span_end[s]) ++s;
  return a.span_decay[s];
}

// One argument each, as cuda_emulation::Launch passes them.
struct Fp32Launch {
  AdamWDeviceCoeffs c;
  AdamWDeviceArgs a;
};
struct StoredLaunch {
  AdamWDeviceCoeffs c;
  AdamWStoredDeviceArgs a;
};

__global__ void AdamWKernel(Fp32Launch l) {
  const AdamWDeviceCoeffs& c = l.c;
  const AdamWDeviceArgs& a = l.a;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    float m = a.m[i], v = a.v[i], root;
    const float p = Step(c, c.decay, a.param[i], a.grad[i], m, v, root);
    a.param[i] = p;
    a.m[i] = m;
    a.v[i] = v;
    WriteOut(a.out, a.out_bf16, i, p);
  }
}

__global__ void AdamWBf16MomentsKernel(StoredLaunch l) {
  const AdamWDeviceCoeffs& c = l.c;
  const AdamWStoredDeviceArgs& a = l.a;
  auto* mb = static_cast<uint16_t*>(a.m);
  auto* vb = static_cast<uint16_t*>(a.v);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    float m = mc::WidenBf16(mb[i]), v = mc::WidenBf16(vb[i]), root;
    const float p = Step(c, DecayAt(a, i), a.param[i], a.grad[i], m, v, root);
    a.param[i] = p;
    mb[i] = mc::Bf16Bits(m);
    vb[i] = mc::Bf16Bits(v);
    WriteOut(a.out, a.out_bf16, i, p);
  }
}

constexpr int kBlockThreads = static_cast<int>(mc::kBlock);  // one thread per element of a block
constexpr int kWarps = kBlockThreads / 32;

__global__ void AdamWInt8MomentsKernel(StoredLaunch l) {
  const AdamWDeviceCoeffs& c = l.c;
  const AdamWStoredDeviceArgs& a = l.a;
  auto* qm = static_cast<int8_t*>(a.m);
  auto* qv = static_cast<uint8_t*>(a.v);
  __shared__ float warp_m[kWarps], warp_v[kWarps], block_scales[2];
  const uint32_t key = mc::RoundingKey(a.step);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t blocks = (a.n + mc::kBlock - 1) / mc::kBlock;
  // The loop's bounds are the block's, so every thread reaches every barrier.
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t i = b * mc::kBlock + threadIdx.x;
    const bool live = i < a.n;
    float m = 0.0f, root = 0.0f, m_max = 0.0f, v_max = 0.0f;
    if (live) {
      m = mc::DecodeSigned8(qm[i], a.m_scale[b]);
      float v = mc::DecodeUnsigned8(qv[i], a.v_scale[b]);
      const float p = Step(c, DecayAt(a, i), a.param[i], a.grad[i], m, v, root);
      a.param[i] = p;
      WriteOut(a.out, a.out_bf16, i, p);
      m_max = mc::Larger(mc::Abs(m), 0.0f);  // NaN: 0, as the CPU's maxima ignore it
      v_max = mc::Larger(v, 0.0f);
    }
    for (int o = 16; o > 0; o >>= 1) {
      m_max = mc::Larger(__shfl_xor_sync(0xffffffffu, m_max, o), m_max);
      v_max = mc::Larger(__shfl_xor_sync(0xffffffffu, v_max, o), v_max);
    }
    if (lane == 0) {
      warp_m[warp] = m_max;
      warp_v[warp] = v_max;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float sm = 0.0f, sv = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        sm = mc::Larger(warp_m[w], sm);
        sv = mc::Larger(warp_v[w], sv);
      }
      block_scales[0] = sm;
      block_scales[1] = sv;
      a.m_scale[b] = sm;  // every thread has read the old scales above
      a.v_scale[b] = sv;
    }
    __syncthreads();
    const float sm = block_scales[0], sv = block_scales[1];
    if (live) {
      const uint32_t bits = mc::RoundingBits(key, a.first + i);
      qm[i] = mc::EncodeSigned8(m, mc::InvScale(sm), bits);
      qv[i] = mc::EncodeUnsigned8(root, mc::InvSqrtScale(sv), mc::VBits(bits));
    }
    __syncthreads();  // block_scales is the next block's
  }
}

}  // namespace device_adamw (device_adamw_emulated)

#if !defined(SLIDEDP_CUDA_EMULATION)
namespace {

// Enough blocks to fill the GPU several times over; the loops cover the rest.
int GridFor(int64_t units_of_work) { return static_cast<int>(units_of_work < 65536 ? units_of_work : 65536); }

std::string LaunchError(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return "";
  return std::string(kernel) + " launch: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

}  // namespace

std::string LaunchAdamW(const AdamWDeviceCoeffs& c, const AdamWDeviceArgs& a, void* stream) {
  if (a.n <= 0) return "";
  constexpr int kThreads = 256;
  device_adamw::AdamWKernel<<<GridFor((a.n + kThreads - 1) / kThreads), kThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>({c, a});
  return LaunchError("AdamWKernel");
}

std::string LaunchAdamWStored(const AdamWDeviceCoeffs& c, const AdamWStoredDeviceArgs& a, void* stream) {
  if (a.n <= 0) return "";
  if (a.spans < 1 || a.spans > kMaxDeviceSpans || a.span_end[a.spans - 1] != a.n) {
    return "AdamWStored: the spans must cover the unit (1 to " + std::to_string(kMaxDeviceSpans) + ", the last ending at n)";
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  constexpr int kThreads = device_adamw::kBlockThreads;
  const int grid = GridFor((a.n + kThreads - 1) / kThreads);
  switch (a.dtype) {
    case MomentDtype::kBf16:
      device_adamw::AdamWBf16MomentsKernel<<<grid, kThreads, 0, s>>>({c, a});
      return LaunchError("AdamWBf16MomentsKernel");
    case MomentDtype::kInt8:
      device_adamw::AdamWInt8MomentsKernel<<<grid, kThreads, 0, s>>>({c, a});
      return LaunchError("AdamWInt8MomentsKernel");
    case MomentDtype::kFp32:
      break;
  }
  return "AdamWStored: fp32 moments go through LaunchAdamW";
}
#endif  // !SLIDEDP_CUDA_EMULATION

}  // namespace slidedp
