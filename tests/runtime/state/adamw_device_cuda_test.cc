// The GPU AdamW of resident units (runtime/state/adamw_device.h) on a CUDA host (skipped
// elsewhere): bit for bit the CPU reference's master, m and v (AdamWReference), and the
// new parameters in bf16 as LibTorch rounds the master, for odd sizes, clipping scales,
// weight decay on and off, and late steps (bias corrections near 1).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/state/adamw.h"
#include "runtime/state/adamw_device.h"

namespace slidedp {
namespace {

TEST(AdamWDevice, EqualsTheCpuReferenceBitForBit) {
#ifndef SLIDEDP_TORCH_CUDA
  GTEST_SKIP() << "a build without CUDA LibTorch";
#else
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  at::manual_seed(5);
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{4097}, int64_t{1} << 20}) {
    for (const auto& [scale, decay, step] : std::vector<std::tuple<float, float, int64_t>>{
             {1.0f, 0.0f, 1}, {0.37f, 0.1f, 3}, {1.0f, 0.01f, 1000}}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " scale " << scale << " decay " << decay << " step " << step);
      AdamWHyper h;
      h.lr = 3e-4f;
      h.beta1 = 0.9f;
      h.beta2 = 0.95f;
      h.eps = 1e-8f;
      h.weight_decay = decay;
      h.step = step;
      h.grad_scale = scale;
      at::Tensor p = at::randn({n}), g = at::randn({n}) * 0.01, m = at::randn({n}) * 1e-3, v = at::rand({n}) * 1e-5;
      std::vector<at::Tensor> dev;
      for (const at::Tensor& t : {p, g, m, v}) dev.push_back(t.cuda());
      at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
      const AdamWDeviceArgs a{dev[0].data_ptr<float>(), dev[1].data_ptr<float>(), dev[2].data_ptr<float>(),
                              dev[3].data_ptr<float>(), out.data_ptr(), true, n};
      ASSERT_EQ(LaunchAdamW(DeviceCoeffs(h), a, /*stream=*/nullptr), "");
      AdamWReference(h, n, p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>());
      EXPECT_TRUE(at::equal(dev[0].cpu(), p)) << "master";
      EXPECT_TRUE(at::equal(dev[2].cpu(), m)) << "m";
      EXPECT_TRUE(at::equal(dev[3].cpu(), v)) << "v";
      EXPECT_TRUE(at::equal(out.cpu(), p.to(at::kBFloat16))) << "bf16 copy";
    }
  }
#endif
}

}  // namespace
}  // namespace slidedp
