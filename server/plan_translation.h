// Plan translation: the runtime's PlanReport (runtime/plan/plan_report.h) as the API's
// Plan message (proto/slidedp/v1/plan.proto). Stateless; any thread.
#pragma once

#include <string>

#include "runtime/plan/plan_report.h"
#include "slidedp/v1/plan.pb.h"

namespace slidedp::server {

// `candidates`: also the search's candidates (otherwise only their count).
v1::Plan PlanToProto(const std::string& job_id, const PlanReport& report, bool candidates);

}  // namespace slidedp::server
