// Admission: see admission.h. The estimate mirrors what the engine allocates:
// HostState (runtime/state/host_state.h), RouteShared's landing buffers
// (runtime/engine/routes.h), each Worker's slots and accumulators and its step
// (runtime/engine/worker.cc), the eager attention of runtime/model/transformer.cc on
// the CPU, and the MLP tiles of runtime/plan/activation_policy.h.
#include "runtime/engine/admission.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/engine/routes.h"
#include "runtime/io/env_switch.h"
#include "runtime/plan/step_schedule.h"
#include "runtime/state/moment_codec.h"

namespace slidedp {
namespace {

// Parameters per unit, as runtime/model/param_layout.cc lays them out, in doubles.
struct UnitSizes {
  double embedding = 0, block = 0, head = 0, total = 0;
  double max_unit = 0, max_rest = 0;  // the largest unit; the largest but the embedding
};

UnitSizes SizesOf(const ModelConfig& c) {
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double D = static_cast<double>(c.head_dim), V = static_cast<double>(c.vocab_size);
  const double q = static_cast<double>(c.num_heads) * D, kv = static_cast<double>(c.num_kv_heads) * D;
  UnitSizes s;
  s.embedding = V * H;
  s.block = 2 * H + q * H + 2 * kv * H + H * q + 3 * I * H;
  if (c.qkv_bias) s.block += q + 2 * kv;
  if (c.o_bias) s.block += H;
  if (c.qk_norm) s.block += 2 * D;
  if (c.mlp_bias) s.block += 2 * I + H;
  s.head = H + (c.tie_word_embeddings ? 0 : V * H);
  s.total = s.embedding + static_cast<double>(c.num_layers) * s.block + s.head;
  s.max_rest = std::max(c.num_layers > 0 ? s.block : 0.0, s.head);
  s.max_unit = std::max(s.embedding, s.max_rest);
  return s;
}

// ChooseMlpTile (activation_policy.h) in doubles: sequence positions per MLP tile.
double MlpTile(const PolicyConfig& policy, double rows, double seq_len, double ffn, double element_bytes) {
  if (policy.mlp_tile_tokens > 0) return std::min(seq_len, static_cast<double>(policy.mlp_tile_tokens));
  double budget = static_cast<double>(int64_t{1} << 30);
  if (policy.gpu_memory_budget_bytes > 0) budget = std::min(budget, policy.gpu_memory_budget_bytes / 32.0);
  const double per_position = std::max(1.0, rows * ffn * element_bytes);
  if (seq_len * per_position <= budget) return seq_len;
  return std::min(seq_len, std::max(256.0, std::floor(budget / per_position / 256) * 256));
}

int64_t Saturate(double bytes) {
  if (!(bytes < 9.2e18)) return INT64_MAX;
  return static_cast<int64_t>(std::max(0.0, bytes));
}

// A "Key:   123 kB" line of /proc/meminfo or /proc/self/status, in bytes; -1 if absent.
int64_t ProcField(const std::string& text, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    const bool kb = absl::ConsumeSuffix(&line, " kB");
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &v) || v < 0) return -1;
    return kb ? v * 1024 : v;
  }
  return -1;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A number in a cgroup file ("max" and v1's near-2^63 "no limit" give -1).
int64_t CgroupNumber(const std::string& path) {
  std::string text = ReadText(path);
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) || v < 0 || v >= (int64_t{1} << 62)) return -1;
  return v;
}

// "key value" lines of memory.stat.
int64_t StatField(const std::string& text, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ');
    int64_t v = 0;
    if (kv.size() == 2 && kv[0] == key && absl::SimpleAtoi(kv[1], &v)) return v;
  }
  return 0;
}

struct Limit {
  int64_t total = -1, available = -1;
};

// The tightest memory limit of the cgroups this process is in, v2 (every level up to
// the root) or v1 (the memory controller's group, or the mount's root in a container).
Limit CgroupLimit() {
  Limit best;
  auto consider = [&](int64_t limit, int64_t usage) {
    if (limit < 0) return;
    if (best.total < 0 || limit < best.total) best.total = limit;
    const int64_t free = std::max<int64_t>(0, limit - std::max<int64_t>(usage, 0));
    if (best.available < 0 || free < best.available) best.available = free;
  };
  for (absl::string_view line : absl::StrSplit(ReadText("/proc/self/cgroup"), '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) {
      // v2: the group and its ancestors; page cache that can be reclaimed is not a use.
      std::string rel = f[2];
      for (;;) {
        const std::string dir = "/sys/fs/cgroup" + (rel == "/" ? "" : rel);
        const int64_t current = CgroupNumber(dir + "/memory.current");
        consider(CgroupNumber(dir + "/memory.max"),
                 current - StatField(ReadText(dir + "/memory.stat"), "inactive_file"));
        if (rel == "/" || rel.empty()) break;
        rel = rel.substr(0, rel.rfind('/'));
        if (rel.empty()) rel = "/";
      }
    } else if (absl::StrContains(f[1], "memory")) {
      for (const std::string& dir : {"/sys/fs/cgroup/memory" + f[2], std::string("/sys/fs/cgroup/memory")}) {
        const int64_t limit = CgroupNumber(dir + "/memory.limit_in_bytes");
        if (limit < 0) continue;
        const int64_t usage = CgroupNumber(dir + "/memory.usage_in_bytes");
        consider(limit, usage - StatField(ReadText(dir + "/memory.stat"), "total_inactive_file"));
        break;
      }
    }
  }
  return best;
}

void Tighten(HostMemory& m, int64_t total, int64_t available, const std::string& from) {
  if (total >= 0 && (m.total < 0 || total < m.total)) {
    m.total = total;
    m.total_from = from;
  }
  if (available >= 0 && (m.available < 0 || available < m.available)) {
    m.available = available;
    m.available_from = from;
  }
}

}  // namespace

std::string FormatBytes(double bytes) {
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;
  if (bytes >= 1e6 * kTiB) return absl::StrFormat("%.3g TiB", bytes / kTiB);
  if (bytes >= kTiB) return absl::StrFormat("%.1f TiB", bytes / kTiB);
  if (bytes >= kGiB) return absl::StrFormat("%.1f GiB", bytes / kGiB);
  if (bytes >= kMiB) return absl::StrFormat("%.1f MiB", bytes / kMiB);
  return absl::StrFormat("%.0f KiB", std::ceil(bytes / kKiB));
}

std::string HostMemoryNeed::Describe() const {
  std::vector<std::pair<double, std::string>> parts = {
      {transfer, "landing buffers"},
      {worker_buffers, "worker buffers"},
      {activations, "activations kept for backward"},
      {working, attention_scores > 0
                    ? absl::StrCat("one block's working memory (", FormatBytes(attention_scores),
                                   " of it attention scores)")
                    : "one block's working memory"},
      {head, "LM head logits"},
      {batch, "batch"},
  };
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out = {absl::StrFormat("host state %s (%g bytes x %.3g parameters)", FormatBytes(host_state),
                                                  state_bytes_per_param, parameters)};
  for (const auto& [bytes, name] : parts) {
    if (bytes >= 1024 * 1024) out.push_back(absl::StrCat(name, " ", FormatBytes(bytes)));
  }
  return absl::StrJoin(out, ", ");
}

HostMemoryNeed EstimateHostMemory(const TrainConfig& config, const ModelConfig& model) {
  const UnitSizes u = SizesOf(model);
  const bool cuda = config.device == DeviceKind::kCuda;
  const double W = std::max(1, config.workers);
  const double dt = config.computed_in() == ComputeDtype::kBf16 ? 2 : 4;  // the compute dtype's bytes
  const bool device_reduces = DeviceReducesGradient(config.policy.grad_route, config.workers);
  const bool bf16_landing =
      LandsInBf16(config.policy.grad_landing, config.policy.grad_route, cuda, config.workers);

  HostMemoryNeed n;
  n.parameters = u.total;
  // fp32 master, m and v as optimizer.state_dtype stores them, the streamed copy, and
  // the fp32 landing buffer unless gradients land in the copy.
  const MomentDtype moments = config.optimizer.state_dtype;
  // Over several hosts each holds 1/count of the master, m and v.
  n.state_bytes_per_param =
      (4 + MomentBytesPerParam(moments)) / static_cast<double>(config.hosts.count) + dt + (bf16_landing ? 0 : 4);
  n.host_state = u.total * n.state_bytes_per_param;
  // gather_host with several workers: one fp32 landing buffer per rank, pinned on cuda.
  if (!device_reduces && W > 1) n.transfer = W * u.max_unit * 4;
  // Resident units over several hosts on cuda: the pinned buffer their gradient is
  // summed over the hosts through (the largest unit's fp32; an upper bound).
  if (cuda && config.hosts.count > 1 && config.policy.resident_units > 0) n.transfer += u.max_unit * 4;

  const double B = static_cast<double>(config.micro_batch_size), T = static_cast<double>(config.seq_len);
  const double MB = static_cast<double>(config.grad_accum), L = static_cast<double>(model.num_layers);
  const double H = static_cast<double>(model.hidden_size), I = static_cast<double>(model.intermediate_size);
  const double V = static_cast<double>(model.vocab_size), D = static_cast<double>(model.head_dim);
  const double nh = static_cast<double>(model.num_heads), nkv = static_cast<double>(model.num_kv_heads);
  const double tokens_worker = MB * B * T;  // one worker's share of the step
  // The step's tokens: TokenBatch (int32 inputs, targets, positions) and their int64
  // tensors; on cuda also their pinned copies.
  n.batch = W * tokens_worker * (36 + (cuda ? 16 : 0));
  const double kept = L * tokens_worker * H * dt;  // every block's input, every micro-batch
  if (cuda) {
    // The rest is GPU memory, except layer inputs offloaded to pinned host memory. With
    // "auto" the placement depends on the GPU's size: not counted (a floor).
    if (config.policy.activations == ActivationPlacement::kHost) n.activations = W * kept;
  } else {
    const double S = StepSchedule::SlotsFor(config.policy.prefetch_depth);
    // Parameter slots, two fp32 accumulators and the embedding's, bf16 landing buffers.
    // Blocks the job keeps (the cpu device keeps none unless asked): a slot and an fp32
    // accumulator each (no larger than the largest unit but the embedding).
    const double kept_blocks = std::clamp(static_cast<double>(config.policy.kept_blocks), 0.0, L);
    n.worker_buffers = W * (S * u.max_unit * dt + (2 * u.max_rest + u.embedding) * 4 +
                            (bf16_landing ? (2 * u.max_rest + u.embedding) * dt : 0) +
                            kept_blocks * u.max_rest * (dt + 4));
    // Layer inputs, and the hidden states and their gradients of every micro-batch.
    n.activations = W * (kept + 2 * tokens_worker * H * dt);
    // One micro-batch through one block with autograd: hidden-sized tensors (norms in
    // fp32), q/k/v, their gradients; the MLP's tile of gate, up, product; the eager
    // attention's scores, softmax (fp32) and probabilities with their gradients, and
    // the causal mask; the RoPE tables.
    const double tokens_micro = B * T;
    const double dense = tokens_micro * (2 * (8 * H + 2 * (nh + 2 * nkv) * D) * dt + 2 * 6 * H * 4);
    const double mlp = 2 * 4 * B * MlpTile(config.policy, B, T, I, dt) * I * dt;
    n.attention_scores = B * nh * T * T * (2 * dt + 8) + T * T;
    const double rope = 6 * T * D * 4;
    n.working = W * (dense + mlp + n.attention_scores + rope);
    n.attention_scores *= W;
    // The head, chunked over the sequence: logits in the compute dtype and in fp32,
    // log-softmax and its gradient; the hidden-state gradient of the micro-batch.
    const double chunk_positions =
        std::min(T, std::max(1.0, std::floor(static_cast<double>(config.policy.loss_chunk_tokens) / std::max(1.0, B))));
    n.head = W * (B * chunk_positions * V * (dt + 12) + tokens_micro * H * dt);
  }
  n.total = n.host_state + n.transfer + n.worker_buffers + n.activations + n.working + n.head + n.batch;
  return n;
}

HostMemory ReadHostMemory() {
  HostMemory m;
  const std::string meminfo = ReadText("/proc/meminfo");
  Tighten(m, ProcField(meminfo, "MemTotal"), ProcField(meminfo, "MemAvailable"), "MemAvailable");
  if (!m.total_from.empty()) m.total_from = "MemTotal";
  const Limit cg = CgroupLimit();
  Tighten(m, cg.total, cg.available, "the cgroup's memory limit");
  const std::string status = ReadText("/proc/self/status");
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const int64_t limit = Saturate(static_cast<double>(rl.rlim_cur));
    Tighten(m, limit, std::max<int64_t>(0, limit - std::max<int64_t>(0, ProcField(status, "VmSize"))), "RLIMIT_AS");
  }
  if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const int64_t limit = Saturate(static_cast<double>(rl.rlim_cur));
    Tighten(m, limit, std::max<int64_t>(0, limit - std::max<int64_t>(0, ProcField(status, "VmData"))), "RLIMIT_DATA");
  }
  return m;
}

absl::Status CheckAdmission(const HostMemoryNeed& need, const HostMemory& host, AdmitAgainst against) {
  const bool now = against == AdmitAgainst::kAvailable;
  const int64_t have = now ? host.available : host.total;
  if (have < 0 || need.total <= static_cast<double>(have)) return absl::OkStatus();
  const std::string& from = now ? host.available_from : host.total_from;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "host memory: the job needs %s (%.4g bytes: %s), more than the %s (%d bytes) %s (%s); reduce the "
      "model, seq_len, micro_batch_size, grad_accum or workers%s (on a host whose memory grows on "
      "demand, as some VMs do, SLIDEDP_ADMISSION=off in the environment skips this check)",
      FormatBytes(need.total), need.total, need.Describe(), FormatBytes(static_cast<double>(have)), have,
      now ? "available now" : "this host has", from, now ? ", or wait for other work to free memory" : ""));
}

bool AdmissionOff() { return EnvIs("SLIDEDP_ADMISSION", "off"); }

absl::Status AdmitJob(const TrainConfig& config, const ModelConfig& model, AdmitAgainst against) {
  if (AdmissionOff()) return absl::OkStatus();
  return CheckAdmission(EstimateHostMemory(config, model), ReadHostMemory(), against);
}

}  // namespace slidedp
