// Rendering of API messages for the slidedp CLI: human-readable text (tables, details,
// a progress line) and JSON (proto3 JSON with the .proto field names). Stateless
// except ProgressLine, which is used by one thread.
#pragma once

#include <string>

#include "slidedp/v1/job.pb.h"
#include "slidedp/v1/node.pb.h"
#include "slidedp/v1/plan.pb.h"
#include "slidedp/v1/service.pb.h"

namespace slidedp::client {

// "SUCCEEDED" for JOB_STATE_SUCCEEDED.
std::string StateName(v1::JobState state);
// JOB_STATE_* from "succeeded" / "SUCCEEDED" / "JOB_STATE_SUCCEEDED"; UNSPECIFIED if none.
v1::JobState ParseState(const std::string& name);
bool IsTerminal(v1::JobState state);

// One JSON object on one line, fields named as in the .proto.
std::string ToJson(const google::protobuf::Message& message);

std::string FormatJobTable(const v1::ListJobsResponse& jobs);
std::string FormatJobDetail(const v1::Job& job);
std::string FormatNode(const v1::NodeInfo& node);
// `slidedp plan`: the knobs, predicted against measured step time, each resource's busy
// and exposed time, the bottleneck, the critical path, memory against the budget, and
// the candidates table when the plan carries it.
std::string FormatPlan(const v1::Plan& plan);
// "job-... RUNNING step 12/60 (pause requested)".
std::string FormatJobSummary(const v1::Job& job);

// The live line of `slidedp watch`: a bar, step/total, loss, the latest held-out eval
// loss (once there is one), tokens/s and ETA.
class ProgressLine {
 public:
  // The text for `event` (no newline); the ETA uses a running mean of step times.
  std::string Render(const v1::JobEvent& event);

 private:
  double mean_step_seconds_ = 0.0;
  int64_t steps_seen_ = 0;
};

std::string FormatDuration(double seconds);  // "1:02:03", "4:05"
std::string FormatRate(double per_second);   // "12.3k", "950"

}  // namespace slidedp::client
