// The GPU AdamW of resident units (runtime/state/adamw_device.h) on a CUDA host (skipped
// elsewhere): bit for bit the CPU reference's master, m and v (AdamWReference), and the
// new parameters in bf16 as LibTorch rounds the master, for odd sizes, clipping scales,
// weight decay on and off, and late steps (bias corrections near 1); with bf16 and 8-bit
// moments (LaunchAdamWStored), the CPU update's bits (AdamWUpdateStored) over units with
// several weight-decay spans and a partial last block, three steps.
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

TEST(AdamWDevice, StoredMomentsEqualTheCpuUpdateBitForBit) {
#ifndef SLIDEDP_TORCH_CUDA
  GTEST_SKIP() << "a build without CUDA LibTorch";
#else
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device in this build or machine";
  at::manual_seed(6);
  for (MomentDtype d : {MomentDtype::kBf16, MomentDtype::kInt8}) {
    for (const int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 77}) {
      SCOPED_TRACE(::testing::Message() << NameOf(d) << " n " << n);
      const std::vector<DecaySpan> spans = {{0, n / 3, 0.1f}, {n / 3, n, 0.0f}};
      at::Tensor p = at::randn({n});
      const int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
      const at::ScalarType mt = d == MomentDtype::kInt8 ? at::kChar : at::kBFloat16;
      const at::ScalarType vt = d == MomentDtype::kInt8 ? at::kByte : at::kBFloat16;
      at::Tensor m = at::zeros({n}, mt), v = at::zeros({n}, vt), ms = at::zeros({blocks}), vs = at::zeros({blocks});
      auto view = [&](at::Tensor& mm, at::Tensor& vv, at::Tensor& s1, at::Tensor& s2) {
        MomentView mv;
        mv.dtype = d;
        mv.m = mm.data_ptr();
        mv.v = vv.data_ptr();
        if (d == MomentDtype::kInt8) {
          mv.m_scale = s1.data_ptr<float>();
          mv.v_scale = s2.data_ptr<float>();
        }
        return mv;
      };
      at::Tensor dp = p.cuda(), dm = m.cuda(), dv = v.cuda(), dms = ms.cuda(), dvs = vs.cuda();
      at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
      for (int64_t step = 1; step <= 3; ++step) {
        AdamWHyper h;
        h.lr = 1e-3f;
        h.step = step;
        h.grad_scale = 0.5f;
        at::Tensor g = at::randn({n}) * 0.01, dg = g.cuda();
        AdamWUpdateStored(h, spans, n, p.data_ptr<float>(), g.data_ptr<float>(), nullptr, view(m, v, ms, vs), 0, 4);
        AdamWStoredDeviceArgs a{};
        const MomentView dmv = view(dm, dv, dms, dvs);
        a.param = dp.data_ptr<float>();
        a.grad = dg.data_ptr<float>();
        a.dtype = d;
        a.m = dmv.m;
        a.v = dmv.v;
        a.m_scale = dmv.m_scale;
        a.v_scale = dmv.v_scale;
        a.out = out.data_ptr();
        a.out_bf16 = true;
        a.n = n;
        a.step = step;
        ASSERT_TRUE(SetDecaySpans(h, spans, &a));
        ASSERT_EQ(LaunchAdamWStored(DeviceCoeffs(h), a, /*stream=*/nullptr), "");
        SCOPED_TRACE(::testing::Message() << "step " << step);
        ASSERT_TRUE(at::equal(dp.cpu(), p)) << "master";
        ASSERT_TRUE(at::equal(dm.cpu(), m)) << "m";
        ASSERT_TRUE(at::equal(dv.cpu(), v)) << "v";
        if (d == MomentDtype::kInt8) {
          ASSERT_TRUE(at::equal(dms.cpu(), ms)) << "m scales";
          ASSERT_TRUE(at::equal(dvs.cpu(), vs)) << "v scales";
        }
        ASSERT_TRUE(at::equal(out.cpu(), p.to(at::kBFloat16))) << "bf16 copy";
      }
    }
  }
#endif
}

}  // namespace
}  // namespace slidedp
