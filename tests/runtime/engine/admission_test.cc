// Admission (runtime/engine/admission.h) and allocation failures (issue 18, case 3):
// absurd model dimensions and specs within the documented limits that cannot fit in
// host memory are refused with RESOURCE_EXHAUSTED naming the numbers, before anything
// is allocated; an allocation that fails anyway is a status, not an abort; the jobs
// the tests and the README's demo run stay admitted on a small CI machine.
#include "runtime/engine/admission.h"

#include <cstdlib>

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "tests/test_support.h"
#include "runtime/engine/fault_injection.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// A fresh directory for this process, removed when the tests end.
std::string TempDir(const std::string& name) { return testing::ProcessTempDir("slidedp_admission", name); }

// The issue's config.json: vocab_size 16777216, hidden_size 1048576, the rest 1.
std::string AbsurdModelDir() {
  const std::string dir = TempDir("absurd");
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "vocab_size": 16777216, "hidden_size": 1048576, "intermediate_size": 1, "num_hidden_layers": 1,
    "num_attention_heads": 1, "num_key_value_heads": 1, "max_position_embeddings": 1})";
  return dir;
}

TrainConfig Tiny() {
  TrainConfig c;
  c.model = "tiny";
  c.steps = 1;
  return c;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(Admission, AbsurdModelDimensionsAreRefusedAtCreateNamingTheNumbers) {
  TrainConfig c = Tiny();
  c.model = AbsurdModelDir();
  c.seq_len = 1;
  c.micro_batch_size = 1;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  const std::string m(t.status().message());
  EXPECT_TRUE(absl::StrContains(m, "host memory")) << m;
  EXPECT_TRUE(absl::StrContains(m, "host state")) << m;        // the main part
  EXPECT_TRUE(absl::StrContains(m, "available now")) << m;      // against what
  EXPECT_TRUE(absl::StrContains(m, "TiB")) << m;                // needed: hundreds of TiB
  EXPECT_TRUE(absl::StrContains(m, "20 bytes x 3.96e+13 parameters")) << m;
}

TEST(Admission, TheEnvironmentCanTurnTheCheckOff) {
  TrainConfig c = Tiny();
  c.seq_len = 1048576;
  c.micro_batch_size = 4;
  const ModelConfig model = PresetConfig("tiny").value();
  EXPECT_EQ(AdmitJob(c, model, AdmitAgainst::kTotal).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_EQ(setenv("SLIDEDP_ADMISSION", "off", 1), 0);
  const absl::Status off = AdmitJob(c, model, AdmitAgainst::kTotal);
  unsetenv("SLIDEDP_ADMISSION");
  EXPECT_TRUE(off.ok()) << off;
  EXPECT_TRUE(absl::StrContains(AdmitJob(c, model, AdmitAgainst::kTotal).message(), "SLIDEDP_ADMISSION=off"));
}

TEST(Admission, TinyWithAMillionTokenSequenceIsRefusedBeforeAllocating) {
  TrainConfig c = Tiny();
  c.seq_len = 1048576;
  c.micro_batch_size = 4;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "attention scores")) << t.status();
  EXPECT_LT(Seconds(t0), 5.0) << "refused before allocating anything large";
}

TEST(Admission, EstimateCountsTheHostStateAsTheEngineLaysItOut) {
  const ModelConfig tiny = *PresetConfig("tiny");
  const double params = static_cast<double>(ParameterCount(tiny));
  TrainConfig c = Tiny();
  HostMemoryNeed n = EstimateHostMemory(c, tiny);
  EXPECT_EQ(n.parameters, params);
  EXPECT_EQ(n.state_bytes_per_param, 20);  // fp32 master, m, v, streamed fp32 copy, fp32 landing
  EXPECT_EQ(n.host_state, 20 * params);
  c.compute_dtype = ComputeDtype::kBf16;
  EXPECT_EQ(EstimateHostMemory(c, tiny).state_bytes_per_param, 18);
  c.policy.grad_landing = GradLanding::kBf16;
  EXPECT_EQ(EstimateHostMemory(c, tiny).state_bytes_per_param, 14);
  // cuda: gradients land in bf16 (14 bytes) unless the host sums several workers' (18).
  TrainConfig g = Tiny();
  g.device = DeviceKind::kCuda;
  n = EstimateHostMemory(g, tiny);
  EXPECT_EQ(n.state_bytes_per_param, 14);
  EXPECT_EQ(n.working, 0) << "the step's working memory is the GPU's";
  g.workers = 2;
  n = EstimateHostMemory(g, tiny);
  EXPECT_EQ(n.state_bytes_per_param, 18);
  EXPECT_GT(n.transfer, 0) << "gather_host: a landing buffer per rank";
  // Issue 22: compact moments, 4 bytes (bf16) or about 6 (int8) less a parameter.
  g.workers = 1;
  g.optimizer.state_dtype = MomentDtype::kBf16;
  EXPECT_DOUBLE_EQ(EstimateHostMemory(g, tiny).state_bytes_per_param, 10);
  g.optimizer.state_dtype = MomentDtype::kInt8;
  EXPECT_DOUBLE_EQ(EstimateHostMemory(g, tiny).state_bytes_per_param, 8 + 8.0 / 256);
  // Issue 24: over H hosts each holds 1/H of the master, m and v and the whole bf16
  // copy, the gradient landing in it: 2 + 12/H (int8 moments: 2 + (6 + 8/256)/H); with
  // gather_host over several workers the fp32 landing buffer adds 4.
  g.optimizer.state_dtype = MomentDtype::kFp32;
  g.hosts.count = 4;
  g.hosts.address = "10.0.0.1";
  EXPECT_DOUBLE_EQ(EstimateHostMemory(g, tiny).state_bytes_per_param, 2 + 12.0 / 4);
  g.optimizer.state_dtype = MomentDtype::kInt8;
  EXPECT_DOUBLE_EQ(EstimateHostMemory(g, tiny).state_bytes_per_param, 2 + (6 + 8.0 / 256) / 4);
  g.optimizer.state_dtype = MomentDtype::kFp32;
  g.workers = 2;
  EXPECT_DOUBLE_EQ(EstimateHostMemory(g, tiny).state_bytes_per_param, 2 + 4 + 12.0 / 4);
  // Resident units over several hosts: the host state as before, and the pinned buffer
  // their fp32 gradient is summed through, the size of the largest unit.
  g.workers = 1;
  const HostMemoryNeed streamed = EstimateHostMemory(g, tiny);
  g.policy.resident_units = 2;
  const HostMemoryNeed resident = EstimateHostMemory(g, tiny);
  int64_t largest = 0;
  for (const UnitLayout& u : BuildLayout(tiny).units) largest = std::max(largest, u.numel);
  EXPECT_DOUBLE_EQ(resident.state_bytes_per_param, streamed.state_bytes_per_param);
  EXPECT_DOUBLE_EQ(resident.transfer - streamed.transfer, 4.0 * largest);
}

TEST(Admission, EstimateGrowsWithTheSequenceAndNeverOverflows) {
  const ModelConfig tiny = *PresetConfig("tiny");
  TrainConfig c = Tiny();
  double last = 0;
  for (int64_t seq : {128, 1024, 8192, 65536}) {
    c.seq_len = seq;
    const HostMemoryNeed n = EstimateHostMemory(c, tiny);
    EXPECT_GT(n.total, last) << seq;
    EXPECT_GT(n.attention_scores, 4.0 * 4 * seq * seq) << "[micro_batch, heads, seq, seq] scores";
    last = n.total;
  }
  ModelConfig huge = tiny;
  huge.vocab_size = huge.hidden_size = huge.intermediate_size = int64_t{1} << 40;
  huge.num_layers = 1 << 20;
  c.seq_len = int64_t{1} << 20;
  c.micro_batch_size = int64_t{1} << 20;
  const HostMemoryNeed n = EstimateHostMemory(c, huge);
  EXPECT_TRUE(std::isfinite(n.total));
  EXPECT_GT(n.total, 1e30);
  EXPECT_EQ(CheckAdmission(n, HostMemory{int64_t{1} << 62, "fake", int64_t{1} << 62, "fake"}, AdmitAgainst::kTotal)
                .code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(Admission, CheckAgainstAFakeHost) {
  HostMemoryNeed need;
  need.parameters = 1e9;
  need.state_bytes_per_param = 20;
  need.host_state = 20e9;
  need.activations = 2e9;
  need.total = 22e9;
  const HostMemory host{int64_t{16} << 30, "MemAvailable", int64_t{24} << 30, "MemTotal"};
  absl::Status now = CheckAdmission(need, host, AdmitAgainst::kAvailable);
  EXPECT_EQ(now.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(now.message(), "20.5 GiB")) << now;  // needed
  EXPECT_TRUE(absl::StrContains(now.message(), "16.0 GiB")) << now;  // available
  EXPECT_TRUE(absl::StrContains(now.message(), "MemAvailable")) << now;
  EXPECT_TRUE(absl::StrContains(now.message(), "host state 18.6 GiB (20 bytes x 1e+09 parameters)")) << now;
  EXPECT_TRUE(absl::StrContains(now.message(), "activations kept for backward 1.9 GiB")) << now;
  EXPECT_TRUE(CheckAdmission(need, host, AdmitAgainst::kTotal).ok()) << "fits in the host's 24 GiB";
  EXPECT_TRUE(CheckAdmission(need, HostMemory{}, AdmitAgainst::kAvailable).ok()) << "unknown: admitted";
  const HostMemory cgroup{int64_t{8} << 30, "the cgroup's memory limit", int64_t{8} << 30, "the cgroup's memory limit"};
  absl::Status total = CheckAdmission(need, cgroup, AdmitAgainst::kTotal);
  EXPECT_EQ(total.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(total.message(), "this host has")) << total;
  EXPECT_TRUE(absl::StrContains(total.message(), "cgroup")) << total;
}

TEST(Admission, ReadsThisHost) {
  const HostMemory m = ReadHostMemory();
  ASSERT_GT(m.total, 0);
  ASSERT_GT(m.available, 0);
  EXPECT_LE(m.available, m.total);
  EXPECT_FALSE(m.total_from.empty());
  EXPECT_FALSE(m.available_from.empty());
}

// What the tests, the demo and the daemon's tests run must stay admitted on the 2-core,
// 24 GiB CI machine with room to spare (and the qwen2.5-0.5b preset on the CPU device
// fits there but not on an 8 GiB machine).
TEST(Admission, TheDemoAndTheTestJobsFitASmallMachine) {
  const HostMemory ci{int64_t{12} << 30, "fake", int64_t{24} << 30, "fake"};
  absl::StatusOr<TrainConfig> demo = LoadTrainConfig(std::string(SLIDEDP_SOURCE_DIR) + "/client/examples/tiny.yaml");
  ASSERT_TRUE(demo.ok()) << demo.status();
  const ModelConfig demo_model = *PresetConfig(demo->model);
  const HostMemoryNeed demo_need = EstimateHostMemory(*demo, demo_model);
  EXPECT_LT(demo_need.total, 0.25 * kGiB) << demo_need.Describe();
  for (const char* name : {"tiny", "small"}) {
    TrainConfig c;  // larger than any test's job on these presets
    c.model = name;
    c.seq_len = 256;
    c.micro_batch_size = 4;
    c.grad_accum = 2;
    c.workers = 4;
    const HostMemoryNeed n = EstimateHostMemory(c, *PresetConfig(name));
    EXPECT_LT(n.total, 1 * kGiB) << name << ": " << n.Describe();
    EXPECT_TRUE(CheckAdmission(n, ci, AdmitAgainst::kAvailable).ok()) << name;
  }
  TrainConfig q;
  q.model = "qwen2.5-0.5b";
  const HostMemoryNeed n = EstimateHostMemory(q, *PresetConfig("qwen2.5-0.5b"));
  EXPECT_TRUE(CheckAdmission(n, ci, AdmitAgainst::kTotal).ok()) << n.Describe();
  const HostMemory small{int64_t{6} << 30, "MemAvailable", int64_t{8} << 30, "MemTotal"};
  EXPECT_EQ(CheckAdmission(n, small, AdmitAgainst::kTotal).code(), absl::StatusCode::kResourceExhausted)
      << n.Describe();
}

TEST(Admission, AnAllocationThatFailsAnywayIsAStatusNotAnAbort) {
  InjectHostAllocationFailure();
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(Tiny());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "out of host memory")) << t.status();
  // Disarmed: the next one is created and trains.
  absl::StatusOr<std::unique_ptr<Trainer>> again = Trainer::Create(Tiny());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->Step().ok());
}

}  // namespace
}  // namespace slidedp
