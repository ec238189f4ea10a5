// The step-time model over several hosts (issue 24, JobShape::hosts): one host predicts
// exactly as before hosts were modelled (figures recorded from the model before), the
// CPU update's work falls to 1/H, the network's busy time is the exchanges' bytes over
// its rate (and their latencies), a slow network is named the bottleneck, gradients land
// as on one host (bf16 where the devices reduce), and the GPU's memory does not depend on
// the hosts.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "runtime/model/model_config.h"
#include "runtime/plan/job_knobs.h"
#include "runtime/plan/policy.h"
#include "runtime/plan/step_model.h"
#include "tests/runtime/plan/plan_test_shapes.h"

namespace slidedp {
namespace {

using testing::RatesOf20261203;

struct Case {
  const char* model;
  int workers;
  int64_t mbs, accum;
  bool clip, cuda;
  int depth;
  ActivationPlacement activations;
  int64_t kept;
};

JobShape JobOf(const Case& c, int hosts) {
  JobShape j;
  j.sequences = c.mbs * c.accum * c.workers;
  j.seq_len = c.cuda ? 4096 : 64;
  j.workers = c.workers;
  j.clip = c.clip;
  j.cuda = c.cuda;
  j.param_bytes = c.cuda ? 2 : 4;
  j.hosts = hosts;
  return j;
}

PlanKnobs KnobsOf(const Case& c) {
  PlanKnobs k;
  k.micro_batch_size = c.mbs;
  k.grad_accum = c.accum;
  k.policy.prefetch_depth = c.depth;
  k.policy.activations = c.activations;
  k.policy.kept_blocks = c.kept;
  k.policy.resident_units = 0;
  return k;
}

// Host 0's elements of a unit of `n` (the largest shard): ceil(n / H) rounded up to whole
// 256-element blocks (int8 moments' blocks never straddle hosts), at most n.
int64_t Shard0(int64_t n, int hosts) { return std::min(n, ((n + hosts - 1) / hosts + 255) / 256 * 256); }

// The seconds of `resource` in `m`, 0 when it has none.
double Seconds(const std::map<std::string, double>& m, const std::string& resource) {
  auto it = m.find(resource);
  return it == m.end() ? 0.0 : it->second;
}

// `c`'s default rates over two hosts with a network of `gbps` and no latency.
Rates NetworkOf(const Case& c, double gbps) {
  Rates r = DefaultRates(ShapeOf(*PresetConfig(c.model)), JobOf(c, 2));
  r.cross_host_latency_s = 0;
  r.cross_host_gbps = gbps;
  return r;
}

StepPrediction Predict(const Case& c, int hosts, const Rates* rates = nullptr) {
  const ModelShape shape = ShapeOf(*PresetConfig(c.model));
  const JobShape job = JobOf(c, hosts);
  return PredictStep(shape, job, KnobsOf(c), rates != nullptr ? *rates : DefaultRates(shape, job));
}

// The 7.62B over 4 GPUs at one and at 16 sequences a GPU, the 14.8B without clipping
// with activations in host memory, the 3.09B on one GPU, the tiny model on the cpu
// device with and without clipping.
const Case kCases[] = {
    {"qwen2.5-7b", 4, 1, 1, true, true, 2, ActivationPlacement::kDevice, 0},
    {"qwen2.5-7b", 4, 4, 4, true, true, 2, ActivationPlacement::kDevice, 8},
    {"qwen3-14b", 4, 1, 1, false, true, 1, ActivationPlacement::kHost, 0},
    {"qwen2.5-3b", 1, 2, 2, true, true, 3, ActivationPlacement::kDevice, 4},
    {"tiny", 2, 2, 1, true, false, 2, ActivationPlacement::kDevice, 0},
    {"tiny", 2, 2, 1, false, false, 2, ActivationPlacement::kDevice, 0},
};

struct Recorded {
  double step, first;
  const char* bottleneck;
  int64_t h2d, d2h;
  std::map<std::string, double> busy, critical;
  int64_t memory;
};

// kCases' predictions by the model before it knew of hosts (printed with %.17g); those
// with kept blocks (the second and fourth) re-recorded when kept blocks became
// micro-batch-major (fetched once; the first micro-batch reaches them sooner), and their
// memory when RoPE's output took attention's layout (a kept block no longer saves a
// transposed copy of attention's output: 2 x (q + kv) bytes a token less); every case's
// memory when the block's working set and the loss chunk counted as the larger of the
// two, not their sum (memory_estimate.cc). All with the default rates of then
// (RatesOf20261203).
const Recorded kBefore[] = {
    {3.9749548038306344, 2.1189779030681368, "cpu_update", 28282469376, 30462466048,
     {{"cpu_update", 2.1154490311111109}, {"d2h", 0.77611378466241021}, {"gpu", 0.61328514530071043},
      {"h2d", 0.60866476466782871}, {"host_memory", 2.9881133602133332}},
     {{"cpu_update", 2.1154490311111083}, {"d2h", 0.77611378466241021}, {"gpu", 0.047976417894400214},
      {"h2d", 0.020000035229358559}, {"host_memory", 1.0154155349333571}},
     16828129280},
    {8.3050329712816193, 7.245069127821818, "gpu", 24553544704, 30462466048,
     {{"cpu_update", 2.1154490311111109}, {"d2h", 0.77611378466245995}, {"gpu", 6.8471745567929503},
      {"h2d", 0.51366031442574034}, {"host_memory", 2.88867536896}},
     {{"cpu_update", 2.1154490311111083}, {"d2h", 0.30109153345224016}, {"gpu", 5.4745642818889202},
      {"h2d", 0.020000035229358559}, {"host_memory", 0.39392808959999215}},
     58122673152},
    {5.9138237781333336, 4.0806675512170285, "host_memory", 57639290880, 60750950400,
     {{"cpu_update", 4.1023075555555559}, {"d2h", 1.5354990831632183}, {"gpu", 1.1335826643126534},
      {"h2d", 1.2579479849751465}, {"host_memory", 5.9138237781333336}},
     {{"cpu_update", 0.81115004938144786}, {"d2h", 1.5050504152866058}, {"gpu", 0.064553281740799662},
      {"h2d", 0.04066896792660657}, {"host_memory", 3.4924010637978737}},
     19656677376},
    {1.7410494714380005, 1.0629418583051351, "cpu_update", 11727134720, 6171877376,
     {{"cpu_update", 0.85720519111111115}, {"d2h", 0.15724528346496136}, {"gpu", 1.0334724650964038},
      {"h2d", 0.24924505753333603}, {"host_memory", 0.6953686357333333}},
     {{"cpu_update", 0.85720462222222515}, {"d2h", 0.015855537732484493}, {"gpu", 0.85374182641907082},
      {"h2d", 0.014247485064220022}},
     16821757952},
    {0.0075591061333333369, 0.0072087168000000007, "gpu", 1003776, 502016,
     {{"cpu_update", 0.00041834666666666669}, {"d2h", 0.00012550400000000198}, {"gpu", 0.0067607999999999974},
      {"h2d", 0.00017180800000000419}, {"host_memory", 0.00065256959999999997}},
     {{"cpu_update", 0.00041813333333333425}, {"d2h", 0.00012550400000000198}, {"gpu", 0.0067326079999999976},
      {"h2d", 0.0001322560000000042}, {"host_memory", 0.0001506047999999989}},
     2739200},
    {0.0073229632000000062, 0.0072087168000000007, "gpu", 1003776, 502016,
     {{"cpu_update", 0.00041834666666666669}, {"d2h", 0.00012550400000000198}, {"gpu", 0.0067608000000000008},
      {"h2d", 0.00017180800000000419}, {"host_memory", 0.00065256959999999997}},
     {{"cpu_update", 0.00011424640000000028}, {"d2h", 0.00012550400000000198}, {"gpu", 0.0067608000000000008},
      {"h2d", 0.00017180800000000419}, {"host_memory", 0.0001506047999999989}},
     2739200},
};

TEST(HostsModel, OneHostPredictsExactlyAsBefore) {
  for (size_t i = 0; i < std::size(kCases); ++i) {
    SCOPED_TRACE(i);
    const ModelShape shape = ShapeOf(*PresetConfig(kCases[i].model));
    const Rates then = RatesOf20261203(shape, JobOf(kCases[i], 1));
    const StepPrediction p = Predict(kCases[i], 1, &then);
    const Recorded& r = kBefore[i];
    EXPECT_EQ(p.step_seconds, r.step);
    EXPECT_EQ(p.first_step_seconds, r.first);
    EXPECT_EQ(p.bottleneck, r.bottleneck);
    EXPECT_EQ(p.h2d_bytes, r.h2d);
    EXPECT_EQ(p.d2h_bytes, r.d2h);
    EXPECT_EQ(p.busy, r.busy);
    EXPECT_EQ(p.critical, r.critical);
    EXPECT_EQ(p.memory.total, r.memory);
    EXPECT_EQ(p.network_bytes, 0);
  }
}

TEST(HostsModel, CpuUpdateFallsWithTheHosts) {
  for (const Case& c : kCases) {
    const ModelShape shape = ShapeOf(*PresetConfig(c.model));
    const double one = Predict(c, 1).busy.at(kResCpuUpdate);
    for (int hosts : {2, 4}) {
      SCOPED_TRACE(std::string(c.model) + " hosts " + std::to_string(hosts));
      const StepPrediction p = Predict(c, hosts);
      // Each host's shard (host 0's, rounded up to a 256-element block): within 256
      // parameters a unit of 1/H.
      EXPECT_NEAR(p.busy.at(kResCpuUpdate), one / hosts, one * 256.0 * shape.num_units() / shape.total_params());
    }
  }
}

TEST(HostsModel, NetworkBusyIsTheExchangedBytesOverTheRate) {
  const Case& c = kCases[0];  // the 7.62B, bf16 streamed copy
  const ModelShape shape = ShapeOf(*PresetConfig(c.model));
  const Rates r = NetworkOf(c, 25);
  for (int hosts : {2, 4}) {
    SCOPED_TRACE(hosts);
    const StepPrediction p = Predict(c, hosts, &r);
    // Per unit: the reduce-scatter of its fp32 gradient (4 bytes a parameter; gather_host
    // with several workers lands in fp32) and the all-gather of its bf16 copy (2), each
    // (H-1)/H of it (host 0's: slices of whole blocks).
    int64_t bytes = 0;
    for (int64_t n : shape.unit_params) bytes += (4 + 2) * Shard0(n, hosts) * (hosts - 1);
    EXPECT_EQ(p.network_bytes, bytes);
    const double total = static_cast<double>(shape.total_params());
    EXPECT_NEAR(static_cast<double>(bytes), 6.0 * total * (hosts - 1) / hosts, 6.0 * 256 * hosts * shape.num_units());
    EXPECT_NEAR(p.busy.at(kResNetwork), static_cast<double>(bytes) / 25e9, 1e-9);
    // With a latency: three collectives a unit (the all-to-all, the norm's sum, the gather).
    Rates slow = r;
    slow.cross_host_latency_s = 1e-3;
    EXPECT_NEAR(Predict(c, hosts, &slow).busy.at(kResNetwork),
                static_cast<double>(bytes) / 25e9 + 3e-3 * shape.num_units(), 1e-9);
  }
  EXPECT_EQ(Predict(c, 1, &r).busy.count(kResNetwork), 0u);
}

TEST(HostsModel, SlowNetworkIsTheBottleneck) {
  for (const Case& c : {kCases[0], kCases[2], kCases[4]}) {  // clip, no clip, the cpu device
    SCOPED_TRACE(c.model);
    const ModelShape shape = ShapeOf(*PresetConfig(c.model));
    Rates r = DefaultRates(shape, JobOf(c, 2));
    r.cross_host_gbps = c.cuda ? 1.0 : 0.001;
    const StepPrediction p = Predict(c, 2, &r);
    EXPECT_EQ(p.bottleneck, kResNetwork);
    EXPECT_GT(p.critical.at(kResNetwork), 0.5 * p.step_seconds);
    // The step cannot be shorter than the exchanges on either thread; the link thread's
    // reduce-scatters alone are 2/3 of the bytes.
    EXPECT_GT(p.step_seconds, 2.0 / 3.0 * p.busy.at(kResNetwork));
    EXPECT_GT(p.step_seconds, Predict(c, 1).step_seconds);
    bool named = false;
    for (const PathSegment& seg : p.critical_path) named |= seg.resource == kResNetwork;
    EXPECT_TRUE(named);
    // The GPU waits for it.
    EXPECT_GT(Seconds(p.exposed, kResNetwork), 0.0);
  }
}

TEST(HostsModel, FastNetworkAndMemoryLeaveTheUpdateHalved) {
  // The 7.62B at one sequence a GPU waits on the CPU update on one host; with two hosts
  // that have a network and host memory to spare, half the update is gone from the step.
  const Case& c = kCases[0];
  Rates r = NetworkOf(c, 1e4);
  r.host_memory_gbps = 1e5;
  const StepPrediction one = Predict(c, 1, &r), two = Predict(c, 2, &r);
  EXPECT_EQ(one.bottleneck, kResCpuUpdate);
  EXPECT_LT(two.step_seconds, one.step_seconds - 0.4 * one.busy.at(kResCpuUpdate));
  EXPECT_LT(Seconds(two.critical, kResCpuUpdate), 0.55 * one.critical.at(kResCpuUpdate));
}

TEST(HostsModel, SeveralHostsLandAsOneHostAndExchangeBf16Gradients) {
  const Case& c = kCases[0];
  PlanKnobs k = KnobsOf(c);
  k.policy.grad_route = GradRoute::kReduceScatter;  // lands in bf16 (auto)
  k.policy.grad_landing = GradLanding::kAuto;
  EXPECT_TRUE(Bf16Landing(JobOf(c, 1), k.policy));
  EXPECT_TRUE(Bf16Landing(JobOf(c, 2), k.policy));
  const ModelShape shape = ShapeOf(*PresetConfig(c.model));
  const StepPrediction one = PredictStep(shape, JobOf(c, 1), k, DefaultRates(shape, JobOf(c, 1)));
  const StepPrediction two = PredictStep(shape, JobOf(c, 2), k, DefaultRates(shape, JobOf(c, 2)));
  EXPECT_EQ(two.d2h_bytes, one.d2h_bytes);  // 1/W of each unit in bf16, as on one host
  // The reduce-scatter moves the bf16 gradient (2 bytes a parameter), the all-gather the
  // bf16 copy (2): half of fp32 landing's 6.
  int64_t bytes = 0;
  for (int64_t n : shape.unit_params) bytes += (2 + 2) * Shard0(n, 2);
  EXPECT_EQ(two.network_bytes, bytes);
  k.policy.grad_landing = GradLanding::kFp32;
  const StepPrediction fp32 = PredictStep(shape, JobOf(c, 2), k, DefaultRates(shape, JobOf(c, 2)));
  EXPECT_EQ(fp32.network_bytes * 4, bytes * 6);
}

TEST(HostsModel, ResidentUnitsSumTheirFp32GradientOverTheHostsAndLeaveTheCpuUpdate) {
  // The 7.62B at one sequence a GPU over 2 hosts with its first 9 units resident on the
  // 4 GPUs of every host: each resident unit's fp32 gradient is summed whole on every
  // host (a reduce-scatter and an all-gather of 4 bytes a parameter, host 0's slices),
  // nothing of it gathered after its update (each host's replica takes the same one);
  // the streamed units exchange as before, and only they take CPU update time.
  const Case& c = kCases[0];
  const ModelShape shape = ShapeOf(*PresetConfig(c.model));
  const Rates r = NetworkOf(c, 25);
  PlanKnobs k = KnobsOf(c);
  k.policy.resident_units = 9;
  const StepPrediction resident = PredictStep(shape, JobOf(c, 2), k, r);
  const StepPrediction streamed = PredictStep(shape, JobOf(c, 2), KnobsOf(c), r);
  int64_t bytes = 0, resident_params = 0, streamed_shards = 0;
  for (int u = 0; u < shape.num_units(); ++u) {
    const int64_t n = shape.unit_params[u];
    if (u < 9) {
      bytes += (4 + 4) * Shard0(n, 2);
      resident_params += n;
    } else {
      bytes += (4 + 2) * Shard0(n, 2);
      streamed_shards += Shard0(n, 2);
    }
  }
  EXPECT_EQ(resident.resident_params, resident_params);
  EXPECT_EQ(resident.network_bytes, bytes);
  EXPECT_NEAR(resident.busy.at(kResNetwork), static_cast<double>(bytes) / 25e9, 1e-9);
  EXPECT_NEAR(resident.busy.at(kResCpuUpdate), static_cast<double>(streamed_shards) / r.adamw_params_per_s, 1e-9);
  EXPECT_GT(resident.busy.at(kResGpuUpdate), 0.0);
  EXPECT_LT(resident.busy.at(kResCpuUpdate), streamed.busy.at(kResCpuUpdate));
  // With a network and host memory to spare, the resident units' CPU update leaves
  // the step: faster than every unit streamed over the same two hosts, where that
  // update is slow enough to matter (3.6e9 parameters a second, the H200 host's before
  // its one-pass kernels; at today's default 5.15e9 the two are within 1%).
  Rates fast = NetworkOf(c, 1e4);
  fast.host_memory_gbps = 1e5;
  fast.adamw_params_per_s = 3.6e9;
  EXPECT_LT(PredictStep(shape, JobOf(c, 2), k, fast).step_seconds,
            PredictStep(shape, JobOf(c, 2), KnobsOf(c), fast).step_seconds);
  // Auto keeps none over several hosts (every host must hold the same units, and each
  // would choose from its own GPUs' memory); one host chooses some.
  PlanKnobs auto_k = KnobsOf(c);
  auto_k.policy.resident_units = -1;
  EXPECT_EQ(ResidentUnits(shape, JobOf(c, 2), auto_k, 0), 0);
  EXPECT_GT(ResidentUnits(shape, JobOf(c, 1), auto_k, 0), 0);
}

TEST(HostsModel, GpuMemoryDoesNotDependOnTheHosts) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.model);
    const ModelShape shape = ShapeOf(*PresetConfig(c.model));
    PlanKnobs k = KnobsOf(c);
    const MemoryEstimate one = EstimateMemory(shape, JobOf(c, 1), k);
    for (int hosts : {2, 4, 8}) {
      EXPECT_EQ(EstimateMemory(shape, JobOf(c, hosts), k).total, one.total);
      EXPECT_EQ(Predict(c, hosts).memory.total, one.total);
    }
  }
  // A plan that lands in bf16: several hosts keep the same bf16 landing buffers.
  const Case& c = kCases[0];
  const ModelShape shape = ShapeOf(*PresetConfig(c.model));
  PlanKnobs k = KnobsOf(c);
  k.policy.grad_route = GradRoute::kReduceScatter;
  const MemoryEstimate one = EstimateMemory(shape, JobOf(c, 1), k), two = EstimateMemory(shape, JobOf(c, 2), k);
  EXPECT_GT(one.grad_buffers, 0);
  EXPECT_EQ(one.total, two.total);
}

TEST(HostsModel, JobShapeOfTakesTheHosts) {
  TrainConfig config;
  config.hosts.count = 3;
  config.hosts.address = "10.0.0.1";
  EXPECT_EQ(JobShapeOf(config).hosts, 3);
  EXPECT_EQ(JobShapeOf(TrainConfig()).hosts, 1);
  // Resident units are refused over several hosts: auto resolves to none.
  const Case& c = kCases[0];
  const ModelShape shape = ShapeOf(*PresetConfig(c.model));
  PlanKnobs k = KnobsOf(c);
  k.policy.resident_units = -1;
  EXPECT_GT(ResidentUnits(shape, JobOf(c, 1), k, int64_t{140} << 30), 0);
  EXPECT_EQ(ResidentUnits(shape, JobOf(c, 2), k, int64_t{140} << 30), 0);
}

TEST(HostsModel, CpuDeviceDefaultsToLoopback) {
  const Case& c = kCases[4];
  const ModelShape shape = ShapeOf(*PresetConfig(c.model));
  EXPECT_EQ(DefaultRates(shape, JobOf(c, 2)).cross_host_gbps, 5.0);
  EXPECT_EQ(DefaultRates(shape, JobOf(kCases[0], 2)).cross_host_gbps, 50.0);
}

}  // namespace
}  // namespace slidedp
