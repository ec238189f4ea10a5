// Plan translation: see plan_translation.h.
#include "server/plan_translation.h"

#include <map>

#include "runtime/io/user_text.h"

namespace slidedp::server {
namespace {

// Plan text comes from the runtime (calibration notes may quote errors): valid UTF-8.
std::string Text(const std::string& s) { return ValidUtf8(s); }

// `resident_bytes`: the resident units' GPU bytes on the GPU holding most (the
// prediction's memory.resident for these knobs).
void KnobsToProto(const PlanKnobs& k, int64_t blocks, int64_t units, int64_t resident_bytes, v1::PlanKnobs* out) {
  out->set_micro_batch_size(k.micro_batch_size);
  out->set_grad_accum(k.grad_accum);
  out->set_chunk_elems(k.policy.chunk_elems);
  out->set_prefetch_depth(k.policy.prefetch_depth);
  out->set_param_route(NameOf(k.policy.param_route));
  out->set_grad_route(NameOf(k.policy.grad_route));
  out->set_activations(NameOf(k.policy.activations));
  out->set_loss_chunk_tokens(k.policy.loss_chunk_tokens);
  out->set_grad_landing(NameOf(k.policy.grad_landing));
  out->set_kept_blocks(k.policy.kept_blocks);
  out->set_blocks(blocks);
  out->set_resident_units(k.policy.resident_units);
  out->set_units(units);
  out->set_resident_bytes(resident_bytes);
  out->set_staged_updates(k.policy.staged_updates);
}

void TimesToProto(const std::map<std::string, double>& times,
                  google::protobuf::RepeatedPtrField<v1::ResourceTime>* out) {
  for (const auto& [resource, seconds] : times) {
    v1::ResourceTime* t = out->Add();
    t->set_resource(Text(resource));
    t->set_seconds(seconds);
  }
}

}  // namespace

v1::Plan PlanToProto(const std::string& job_id, const PlanReport& r, bool candidates) {
  v1::Plan p;
  p.set_job_id(job_id);
  p.set_auto_(r.auto_plan);
  KnobsToProto(r.knobs, r.blocks, r.units, r.prediction.memory.resident, p.mutable_knobs());
  const StepPrediction& pr = r.prediction;
  p.set_predicted_step_seconds(pr.step_seconds);
  p.set_measured_step_seconds(r.measured_step_seconds);
  p.set_step(r.steps);
  p.set_bottleneck(Text(pr.bottleneck));
  TimesToProto(pr.busy, p.mutable_busy());
  TimesToProto(pr.exposed, p.mutable_exposed());
  TimesToProto(pr.critical, p.mutable_critical());
  for (const PathSegment& s : pr.critical_path) {
    v1::PathSegment* o = p.add_critical_path();
    o->set_resource(Text(s.resource));
    o->set_what(Text(s.what));
    o->set_seconds(s.seconds);
  }
  p.set_fill_seconds(pr.fill_seconds);
  p.set_drain_seconds(pr.drain_seconds);
  v1::MemoryEstimate* m = p.mutable_memory();
  m->set_slots_bytes(pr.memory.slots);
  m->set_grad_buffers_bytes(pr.memory.grad_buffers);
  m->set_activations_bytes(pr.memory.activations);
  m->set_working_bytes(pr.memory.working);
  m->set_loss_chunk_bytes(pr.memory.loss_chunk);
  m->set_margin_bytes(pr.memory.margin);
  m->set_total_bytes(pr.memory.total);
  p.set_memory_budget_bytes(r.budget_bytes);
  v1::PlanRates* rates = p.mutable_rates();
  rates->set_h2d_gbps(r.rates.h2d_gbps);
  rates->set_d2h_gbps(r.rates.d2h_gbps);
  rates->set_duplex_gbps(r.rates.duplex_gbps);
  rates->set_collective_gbps(r.rates.collective_gbps);
  rates->set_forward_seconds_per_token_layer(r.rates.forward_s);
  rates->set_recompute_seconds_per_token_layer(r.rates.recompute_s);
  rates->set_backward_seconds_per_token_layer(r.rates.backward_s);
  rates->set_head_seconds_per_token(r.rates.head_s);
  rates->set_adamw_params_per_second(r.rates.adamw_params_per_s);
  rates->set_host_memory_gbps(r.rates.host_memory_gbps);
  rates->set_gpu_update_params_per_second(r.rates.gpu_update_params_per_s);
  rates->set_cross_host_gbps(r.rates.cross_host_gbps);
  rates->set_cross_host_latency_seconds(r.rates.cross_host_latency_s);
  p.set_calibration_seconds(r.calibration_seconds);
  for (const std::string& n : r.calibration_notes) p.add_calibration_notes(Text(n));
  p.set_replans(r.replans);
  p.set_oom_retries(r.oom_retries);
  p.set_last_change(Text(r.last_change));
  p.set_candidate_count(static_cast<int32_t>(r.candidates.size()));
  if (candidates) {
    const std::string chosen = DescribeKnobs(r.knobs);
    for (const Candidate& c : r.candidates) {
      v1::PlanCandidate* o = p.add_candidates();
      KnobsToProto(c.knobs, r.blocks, r.units, c.prediction.memory.resident, o->mutable_knobs());
      o->set_predicted_step_seconds(c.prediction.step_seconds);
      o->set_bottleneck(Text(c.prediction.bottleneck));
      o->set_memory_bytes(c.prediction.memory.total);
      o->set_fits(c.fits);
      o->set_chosen(DescribeKnobs(c.knobs) == chosen && c.knobs.policy.loss_chunk_tokens == r.knobs.policy.loss_chunk_tokens);
    }
  }
  return p;
}

}  // namespace slidedp::server
