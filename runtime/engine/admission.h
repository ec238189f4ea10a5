// Admission: the host memory a job needs, and whether the host has it, decided before
// anything is allocated, so that a job that cannot fit is refused with
// RESOURCE_EXHAUSTED naming the numbers instead of being killed by the kernel (or
// aborting the process) half-way through its allocations.
//  - EstimateHostMemory: from the job's config and the model's shape alone (no
//    weights, no data), the bytes the engine will hold in host memory, by part. In
//    doubles, so that absurd shapes give absurd numbers, never an overflow. It is a
//    floor, not a bound: data sets, LibTorch's own caches and the process are not
//    counted; what sits on a GPU is not host memory.
//  - ReadHostMemory: what the host has now (/proc/meminfo, the cgroup's memory limit,
//    RLIMIT_AS and RLIMIT_DATA).
//  - CheckAdmission: the estimate against what is available now (Trainer::Create) or
//    against the host's total (the daemon's SubmitJob, while another job may hold
//    memory).
// Plain functions; any thread. ReadHostMemory reads /proc and /sys.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "runtime/model/model_config.h"
#include "runtime/train_config.h"

namespace slidedp {

// Host bytes of a job, by part (see EstimateHostMemory).
struct HostMemoryNeed {
  double parameters = 0;       // the model's parameter count
  // fp32 moments: 20 (fp32 compute), 18 (bf16, fp32 landing), 14 (bf16 landing); bf16
  // moments 4 less, int8 moments about 6 less.
  double state_bytes_per_param = 0;
  double host_state = 0;       // fp32 master, AdamW m and v, the streamed copy, the fp32 gradient landing
  double transfer = 0;         // host landing buffers where the host sums the workers' gradients
  double worker_buffers = 0;   // cpu device: every worker's parameter slots and gradient accumulators
  double activations = 0;      // layer inputs kept for backward (cpu device, or policy.activations host)
  double working = 0;          // cpu device: one block's recompute and backward of one micro-batch
                               // (attention scores [heads, seq, seq] included), per worker
  double attention_scores = 0; // ... of which the attention scores and their gradients
  double head = 0;             // cpu device: the LM head's chunk of logits and its gradient, per worker
  double batch = 0;            // the step's token tensors
  double total = 0;

  // "host state 20.1 GiB (20 bytes x 1.08e+09 parameters), activations kept for
  // backward 3.2 GiB, ...": the parts of 1 MiB or more, largest first after the state.
  std::string Describe() const;
};

// The host memory that `config` needs on `model`. The device decides what counts: on
// the cpu device the workers' buffers, activations and working memory are host
// memory; on cuda only the host state, the landing buffers, the batch and (with
// policy.activations "host") the offloaded layer inputs are.
HostMemoryNeed EstimateHostMemory(const TrainConfig& config, const ModelConfig& model);

// What the host has, in bytes; -1 where nothing is known.
struct HostMemory {
  int64_t available = -1;  // what a job may still take now: the least of MemAvailable, the
                           // cgroup's limit minus its usage (less reclaimable page cache),
                           // RLIMIT_AS minus the process's virtual size, RLIMIT_DATA minus its data
  std::string available_from;  // which of them: "MemAvailable", "cgroup memory limit", ...
  int64_t total = -1;      // what a job could have at most: the least of MemTotal, the cgroup's
                           // limit, RLIMIT_AS, RLIMIT_DATA
  std::string total_from;
};

HostMemory ReadHostMemory();

enum class AdmitAgainst {
  kAvailable,  // the job starts now: what is free now
  kTotal,      // the job is queued: what the host has at all
};

// OK when `need` fits in `host` (an unknown reading admits). Else RESOURCE_EXHAUSTED:
// "host memory: the job needs N GiB (bytes: parts), more than the M GiB (bytes)
// available now (MemAvailable); reduce ...".
absl::Status CheckAdmission(const HostMemoryNeed& need, const HostMemory& host, AdmitAgainst against);

// EstimateHostMemory then CheckAdmission against ReadHostMemory(); OK without checking
// when the environment has SLIDEDP_ADMISSION=off (hosts whose memory grows on demand,
// such as ballooning VMs, report too little until it is used).
absl::Status AdmitJob(const TrainConfig& config, const ModelConfig& model, AdmitAgainst against);

// "12.3 GiB", "512.0 MiB", "1.5e+05 TiB": bytes for messages.
std::string FormatBytes(double bytes);

}  // namespace slidedp
