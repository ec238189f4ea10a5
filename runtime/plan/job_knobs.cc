// JobKnobs: see job_knobs.h.
#include "runtime/plan/job_knobs.h"

#include "runtime/state/moment_codec.h"

namespace slidedp {

JobShape JobShapeOf(const TrainConfig& config) {
  JobShape j;
  j.sequences = config.global_batch_sequences();
  j.seq_len = config.seq_len;
  j.workers = config.workers;
  j.clip = config.optimizer.max_grad_norm > 0;
  j.cuda = config.device == DeviceKind::kCuda;
  j.param_bytes = config.computed_in() == ComputeDtype::kBf16 ? 2 : 4;
  j.update_bytes_per_param = 12.0 + 2.0 * MomentBytesPerParam(config.optimizer.state_dtype);
  j.moments = config.optimizer.state_dtype;
  j.hosts = config.hosts.count;
  return j;
}

PlanKnobs KnobsOf(const TrainConfig& config) {
  PlanKnobs k;
  k.micro_batch_size = config.micro_batch_size;
  k.grad_accum = config.grad_accum;
  k.policy = config.policy;
  return k;
}

TrainConfig WithKnobs(const TrainConfig& config, const PlanKnobs& knobs) {
  TrainConfig c = config;
  c.micro_batch_size = knobs.micro_batch_size;
  c.grad_accum = knobs.grad_accum;
  c.policy = knobs.policy;
  return c;
}

}  // namespace slidedp
