// What the model tests of bf16 ops share: leaves, the devices to run on (the CPU, and
// the first GPU where there is one), bf16 random tensors, and closeness relative to the
// reference's largest magnitude. Header only; the tests' own thread.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace slidedp {
namespace model_testing {

// A copy of t that is an autograd leaf.
inline at::Tensor Leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }

inline std::vector<at::Device> Devices() {
  std::vector<at::Device> d{at::kCPU};
  if (at::hasCUDA()) d.emplace_back(at::kCUDA, 0);
  return d;
}

// Normal values times `scale`, drawn in fp32 and rounded to bf16, on `device`.
inline at::Tensor Randn(at::IntArrayRef shape, const at::Device& device, double scale = 1.0) {
  return (at::randn(shape, at::kFloat) * scale).to(at::kBFloat16).to(device);
}

// got and want of one shape, the largest difference at most `tolerance` of want's
// largest magnitude.
inline void ExpectClose(const at::Tensor& got, const at::Tensor& want, double tolerance, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const at::Tensor g = got.to(at::kFloat).cpu(), w = want.to(at::kFloat).cpu();
  const double scale = std::max(w.abs().max().item<double>(), 1e-6);
  const double err = (g - w).abs().max().item<double>();
  EXPECT_LE(err / scale, tolerance) << what << ": max error " << err << " of max " << scale;
}

}  // namespace model_testing
}  // namespace slidedp
