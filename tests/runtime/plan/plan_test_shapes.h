// What the plan tests share: the H200's memory, a synthetic 160M shape, and a plan
// manager started without calibration (policy.auto off). Header-only; the test's thread.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/model/model_config.h"
#include "runtime/plan/plan_manager.h"
#include "runtime/plan/step_model.h"
#include "runtime/train_config.h"

namespace slidedp::testing {

inline constexpr int64_t kGiB = int64_t{1} << 30;
inline constexpr int64_t kH200 = int64_t{143771} << 20;  // an H200's memory as CUDA reports it

// 8 blocks of 12M parameters, a 32M embedding, an untied 32M head: 160M in all.
inline ModelShape Synthetic() {
  ModelShape s;
  s.layers = 8;
  s.hidden = 1024;
  s.ffn = 4096;
  s.heads = 8;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.vocab = 32000;
  s.tied = false;
  s.unit_params.push_back(32'000'000);
  for (int l = 0; l < 8; ++l) s.unit_params.push_back(12'000'000);
  s.unit_params.push_back(32'000'000);
  return s;
}

// PlanManager::Start with policy.auto off: the job's knobs, default rates (calibration
// must not be asked for).
inline absl::StatusOr<PlanManager> UncalibratedPlan(const ModelConfig& m, const TrainConfig& c) {
  return PlanManager::Start(m, c, [] { return absl::StatusOr<Calibration>(absl::InternalError("not called")); });
}

}  // namespace slidedp::testing
