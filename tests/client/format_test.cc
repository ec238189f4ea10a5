// CLI output: state names, durations, rates, the progress line.
#include "client/format.h"

#include <gtest/gtest.h>

namespace slidedp::client {
namespace {

TEST(FormatTest, StateNamesRoundTrip) {
  EXPECT_EQ(StateName(v1::JOB_STATE_SUCCEEDED), "SUCCEEDED");
  EXPECT_EQ(ParseState("running"), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(ParseState("JOB_STATE_PAUSED"), v1::JOB_STATE_PAUSED);
  EXPECT_EQ(ParseState("bogus"), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_PAUSED));
}

TEST(FormatTest, DurationsAndRates) {
  EXPECT_EQ(FormatDuration(65), "1:05");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "-");
  EXPECT_EQ(FormatRate(950), "950");
  EXPECT_EQ(FormatRate(12345), "12.3k");
  EXPECT_EQ(FormatRate(2.5e6), "2.50M");
}

TEST(FormatTest, ProgressLineShowsStepLossRateAndEta) {
  ProgressLine line;
  v1::JobEvent event;
  event.set_type(v1::JobEvent::TYPE_STEP);
  event.mutable_step()->set_step_seconds(2.0);
  v1::Job* job = event.mutable_job();
  job->set_state(v1::JOB_STATE_RUNNING);
  job->set_step(15);
  job->set_total_steps(60);
  job->set_last_loss(3.25);
  job->set_tokens_per_second(12345);
  const std::string text = line.Render(event);
  EXPECT_NE(text.find("15/60"), std::string::npos) << text;
  EXPECT_NE(text.find("loss 3.2500"), std::string::npos) << text;
  EXPECT_NE(text.find("12.3k tok/s"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA 1:30"), std::string::npos) << text;  // 45 steps x 2 s
  EXPECT_NE(text.find("[#######......"), std::string::npos) << text;
  EXPECT_EQ(text.find("eval"), std::string::npos) << text;  // none yet
}

TEST(FormatTest, ProgressLineAndDetailShowTheLatestEvalLoss) {
  ProgressLine line;
  v1::JobEvent event;
  event.set_type(v1::JobEvent::TYPE_STEP);
  v1::Job* job = event.mutable_job();
  job->set_state(v1::JOB_STATE_RUNNING);
  job->set_step(20);
  job->set_total_steps(60);
  job->set_last_loss(3.25);
  job->set_last_eval_loss(3.5);
  const std::string text = line.Render(event);
  EXPECT_NE(text.find("loss 3.2500  eval 3.5000"), std::string::npos) << text;
  EXPECT_NE(FormatJobDetail(*job).find("last eval loss:  3.500000"), std::string::npos) << FormatJobDetail(*job);
  job->clear_last_eval_loss();
  EXPECT_EQ(FormatJobDetail(*job).find("eval"), std::string::npos);
}

TEST(FormatTest, JsonCarriesTheEvalLossOnlyWhereThereIsOne) {
  v1::StepEvent step;
  step.set_step(4);
  EXPECT_EQ(ToJson(step).find("\"eval_loss\""), std::string::npos) << ToJson(step);
  step.set_eval_loss(2.5);
  step.set_eval_tokens(128);
  EXPECT_NE(ToJson(step).find("\"eval_loss\":2.5"), std::string::npos) << ToJson(step);
  EXPECT_NE(ToJson(step).find("\"eval_tokens\":\"128\""), std::string::npos) << ToJson(step);
  v1::Job job;
  job.set_last_eval_loss(2.5);
  EXPECT_NE(ToJson(job).find("\"last_eval_loss\":2.5"), std::string::npos) << ToJson(job);
}

TEST(FormatTest, JsonUsesProtoFieldNames) {
  v1::Job job;
  job.set_id("job-1");
  job.set_tokens_seen(5);
  const std::string json = ToJson(job);
  EXPECT_NE(json.find("\"tokens_seen\":\"5\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\":\"JOB_STATE_UNSPECIFIED\""), std::string::npos) << json;
}

v1::Plan SamplePlan() {
  v1::Plan plan;
  plan.set_job_id("job-1");
  plan.set_auto_(true);
  v1::PlanKnobs* k = plan.mutable_knobs();
  k->set_micro_batch_size(4);
  k->set_grad_accum(2);
  k->set_prefetch_depth(2);
  k->set_activations("device");
  k->set_param_route("replicate");
  k->set_grad_route("gather_host");
  k->set_loss_chunk_tokens(1024);
  k->set_kept_blocks(12);
  k->set_blocks(36);
  plan.set_predicted_step_seconds(2.0);
  plan.set_measured_step_seconds(2.2);
  plan.set_step(7);
  plan.set_bottleneck("cpu_update");
  v1::ResourceTime* busy = plan.add_busy();
  busy->set_resource("cpu_update");
  busy->set_seconds(1.5);
  v1::PathSegment* seg = plan.add_critical_path();
  seg->set_resource("cpu_update");
  seg->set_what("update embedding .. update block 3");
  seg->set_seconds(1.25);
  plan.mutable_memory()->set_total_bytes(int64_t{3} << 30);
  plan.set_memory_budget_bytes(int64_t{80} << 30);
  v1::PlanCandidate* c = plan.add_candidates();
  *c->mutable_knobs() = *k;
  c->set_predicted_step_seconds(2.0);
  c->set_bottleneck("cpu_update");
  c->set_memory_bytes(int64_t{3} << 30);
  c->set_fits(true);
  c->set_chosen(true);
  return plan;
}

TEST(FormatTest, PlanShowsPredictedMeasuredResourcesAndCandidates) {
  const std::string text = FormatPlan(SamplePlan());
  EXPECT_NE(text.find("job:             job-1 (policy.auto)"), std::string::npos) << text;
  EXPECT_NE(text.find("plan:            4 x 2 micro-batches, prefetch 2, activations device, replicate/gather_host"),
            std::string::npos) << text;
  EXPECT_NE(text.find("loss chunk 1024, 12 of 36 blocks kept\n"), std::string::npos) << text;
  EXPECT_NE(text.find("predicted 2.000 s, measured 2.200 s (+10.0%) at step 7"), std::string::npos) << text;
  EXPECT_NE(text.find("bottleneck:      cpu_update"), std::string::npos) << text;
  EXPECT_NE(text.find("  cpu_update        1.500"), std::string::npos) << text;
  EXPECT_NE(text.find("cpu_update      1.250 s  update embedding .. update block 3"), std::string::npos) << text;
  EXPECT_NE(text.find("gpu memory:      3.2 GB predicted of 85.9 GB"), std::string::npos) << text;
  EXPECT_NE(text.find("candidates (1):"), std::string::npos) << text;
  EXPECT_NE(text.find("  *       2.000  cpu_update"), std::string::npos) << text;
  const std::string json = ToJson(SamplePlan());
  EXPECT_NE(json.find("\"predicted_step_seconds\":2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"bottleneck\":\"cpu_update\""), std::string::npos) << json;
}

// Issue 21: the streamed units whose update a GPU runs (policy.staged_updates), at
// most those left streamed; nothing when none.
TEST(FormatTest, PlanShowsStagedUpdates) {
  EXPECT_EQ(FormatPlan(SamplePlan()).find("staged"), std::string::npos);
  v1::Plan plan = SamplePlan();
  v1::PlanKnobs* k = plan.mutable_knobs();
  k->set_units(38);
  k->set_resident_units(30);
  k->set_staged_updates(3);
  EXPECT_NE(FormatPlan(plan).find(", 3 updates staged on a GPU"), std::string::npos) << FormatPlan(plan);
  k->set_staged_updates(99);
  EXPECT_NE(FormatPlan(plan).find(", 8 updates staged on a GPU"), std::string::npos) << FormatPlan(plan);
}

// Issue 21: the units whose training state lives on a GPU, out of the model's, and the
// bytes they take on the GPU holding most; nothing when none is resident.
TEST(FormatTest, PlanShowsResidentUnits) {
  EXPECT_EQ(FormatPlan(SamplePlan()).find("resident"), std::string::npos);
  v1::Plan plan = SamplePlan();
  v1::PlanKnobs* k = plan.mutable_knobs();
  k->set_resident_units(10);
  k->set_units(38);
  k->set_resident_bytes(int64_t{20} * 1000 * 1000 * 1000);
  *plan.mutable_candidates(0)->mutable_knobs() = *k;
  const std::string text = FormatPlan(plan);
  EXPECT_NE(text.find("loss chunk 1024, 12 of 36 blocks kept, 10 of 38 units resident (20.0 GB on a GPU)\n"),
            std::string::npos)
      << text;
  auto count = [](const std::string& text, const std::string& part) {
    int n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(text, "10 of 38 units resident (20.0 GB on a GPU)"), 2) << "the plan and its candidate\n" << text;
  k->set_resident_units(0);
  EXPECT_EQ(count(FormatPlan(plan), "units resident"), 1) << "the candidate's only";
}

}  // namespace
}  // namespace slidedp::client
