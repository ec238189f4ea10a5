// HostState's pinned buffers on a CUDA host (skipped elsewhere): every unit's streamed
// copy and fp32 gradient are page-locked, zeroed, apart from each other and views of one
// slab of exactly their size at 4 KiB steps from its start (LibTorch's pinned allocator would round each
// up to a power of two), and a copy to the GPU and back through them is exact.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#ifdef SLIDEDP_WITH_CUDA_TOOLKIT
#include <cuda_runtime_api.h>
#endif

#include <cstdint>

#include "runtime/model/model_config.h"
#include "runtime/state/host_state.h"

namespace slidedp {
namespace {

TEST(HostStateCuda, PinnedBuffersAreOneExactSlab) {
#ifndef SLIDEDP_WITH_CUDA_TOOLKIT
  GTEST_SKIP() << "a build without the CUDA toolkit";
#else
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  ModelConfig c = *PresetConfig("tiny");
  HostState state(c, at::kBFloat16, /*chunk_elems=*/0, /*pin=*/true, /*fp32_grad=*/true);
  const char* previous_end = nullptr;
  // The driver's pointer is not always page-aligned (2 KiB for small slabs on the H200
  // host): the views keep 4 KiB steps from the slab's start.
  const char* slab = static_cast<const char*>(state.unit(0).params.data_ptr());
  for (int u = 0; u < state.num_units(); ++u) {
    SCOPED_TRACE(u);
    for (const at::Tensor& t : {state.unit(u).params, state.unit(u).grad}) {
      // Page-locked as the CUDA driver sees it (LibTorch's is_pinned() did not say so for
      // every view on the H200 host); HostState::pinned() tells the routes.
      cudaPointerAttributes attr;
      ASSERT_EQ(cudaPointerGetAttributes(&attr, t.data_ptr()), cudaSuccess);
      EXPECT_EQ(attr.type, cudaMemoryTypeHost);
      EXPECT_EQ((static_cast<const char*>(t.data_ptr()) - slab) % 4096, 0);
      EXPECT_EQ(t.count_nonzero().item<int64_t>(), 0);
      const char* begin = static_cast<const char*>(t.data_ptr());
      if (previous_end != nullptr) {
        // The next view starts at the first 4 KiB boundary after the previous one ends.
        EXPECT_GE(begin, previous_end);
        EXPECT_LT(begin - previous_end, 4096);
      }
      previous_end = begin + t.nbytes();
    }
  }
  EXPECT_TRUE(state.pinned());
  at::Tensor p = state.unit(1).params;
  p.copy_(at::randn({p.numel()}).to(at::kBFloat16));
  at::Tensor back = p.to(at::kCUDA, /*non_blocking=*/true).to(at::kCPU);
  EXPECT_TRUE(at::equal(back, p));
#endif
}

}  // namespace
}  // namespace slidedp
