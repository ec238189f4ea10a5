// TrainingServiceImpl: validate, translate, call the JobManager, return. Any gRPC thread.
#include "server/service.h"
#include "server/thread_priority.h"

#include <unistd.h>

#include <system_error>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "runtime/engine/admission.h"
#include "runtime/model/model_config.h"
#include "runtime/io/user_text.h"
#include "server/grpc_status.h"
#include "server/job_record.h"
#include "server/plan_translation.h"
#include "server/proc_stats.h"
#include "server/spec_translation.h"
#include "server/watch_reactor.h"

namespace slidedp::server {
namespace {

constexpr size_t kMaxIdBytes = 128;

// Runs `body` (which returns absl::Status) and finishes the unary call with it.
template <typename Body>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(body()));
  return reactor;
}

// The job manager keeps its text valid UTF-8; this is the last check before a job is
// serialized for a client (protobuf would send invalid text that clients cannot parse).
absl::Status Assign(absl::StatusOr<v1::Job> job, v1::Job* out) {
  if (!job.ok()) return job.status();
  *out = *std::move(job);
  MakeTextValidUtf8(out);
  return absl::OkStatus();
}

void FillMeasured(const NodeSnapshot& node, v1::MeasuredRates* out) {
  if (!node.has_step) return;
  const StepStats& s = node.last_step;
  if (s.step_seconds > 0) {
    out->set_h2d_bytes_per_second(static_cast<double>(s.h2d_bytes) / s.step_seconds);
    out->set_d2h_bytes_per_second(static_cast<double>(s.d2h_bytes) / s.step_seconds);
  }
  if (s.update_busy_seconds > 0) {
    out->set_adamw_params_per_second(static_cast<double>(node.last_num_parameters) /
                                     s.update_busy_seconds);
  }
  out->set_tokens_per_second(s.tokens_per_second);
  out->set_step_seconds(s.step_seconds);
}

// Admission at submit: the job's host memory (runtime/engine/admission.h) against what
// the host has at all, since the job may wait behind another that holds memory now
// (Trainer::Create checks what is free when it starts). Reads config.json only; a
// model whose config.json cannot be read is left for the job's start to report.
absl::Status AdmitAtSubmit(const TrainConfig& config) {
  absl::StatusOr<ModelConfig> model = PresetConfig(config.model);
  if (!model.ok()) {
    if (!ModelIsDirectory(config.model)) return absl::OkStatus();
    model = LoadModelConfig(config.model);
    if (!model.ok()) return absl::OkStatus();
  }
  return AdmitJob(config, *model, AdmitAgainst::kTotal);
}

}  // namespace

absl::Status CheckJobId(const std::string& id, absl::string_view field) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", id.size(), " bytes, longer than the ", kMaxIdBytes, " allowed"));
  }
  for (char c : id) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"", absl::CHexEscape(id), "\" holds a character that is not printable ASCII"));
    }
  }
  return absl::OkStatus();
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

absl::Status TrainingServiceImpl::CheckAuth(const grpc::CallbackServerContext& context) const {
  // Every handler starts here, on one of gRPC's threads: serving yields to training.
  LowerCallingThreadPriority(options_.rpc_nice);
  if (options_.bearer_token.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const std::string expected = absl::StrCat("Bearer ", options_.bearer_token);
  if (it == metadata.end() ||
      !ConstantTimeEquals(absl::string_view(it->second.data(), it->second.size()), expected)) {
    return absl::UnauthenticatedError(
        "missing or wrong bearer token (send \"authorization: Bearer <token>\")");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* TrainingServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                         const v1::SubmitJobRequest* request,
                                                         v1::Job* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    absl::StatusOr<TrainConfig> config = JobSpecToTrainConfig(request->spec(), *options_.paths, *options_.peers);
    if (!config.ok()) return config.status();
    if (absl::Status s = AdmitAtSubmit(*config); !s.ok()) return s;
    return Assign(options_.jobs->Submit(SpecAsSubmitted(request->spec())), response);
  });
}

grpc::ServerUnaryReactor* TrainingServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                      const v1::GetJobRequest* request,
                                                      v1::Job* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    if (absl::Status s = CheckJobId(request->id()); !s.ok()) return s;
    return Assign(options_.jobs->Get(request->id()), response);
  });
}

grpc::ServerUnaryReactor* TrainingServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                        const v1::ListJobsRequest* request,
                                                        v1::ListJobsResponse* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    std::vector<v1::JobState> states;
    for (int state : request->states()) {
      if (!v1::JobState_IsValid(state) || state == v1::JOB_STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(absl::StrCat("states: ", state, " is not a job state"));
      }
      states.push_back(static_cast<v1::JobState>(state));
    }
    if (request->page_token().size() > 32) {
      return absl::InvalidArgumentError("page_token: not a token returned by ListJobs");
    }
    absl::StatusOr<JobManager::ListResult> result =
        options_.jobs->List(states, request->page_size(), request->page_token());
    if (!result.ok()) return result.status();
    for (v1::Job& job : result->jobs) {
      MakeTextValidUtf8(&job);
      *response->add_jobs() = std::move(job);
    }
    response->set_next_page_token(result->next_page_token);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::JobEvent>* TrainingServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  absl::Status status = CheckAuth(*context);
  if (status.ok()) status = CheckJobId(request->id());
  if (!status.ok()) {
    // A reactor that finishes at once with the error.
    class Refuse final : public grpc::ServerWriteReactor<v1::JobEvent> {
     public:
      explicit Refuse(const grpc::Status& s) { Finish(s); }
      void OnDone() override { delete this; }
    };
    return new Refuse(ToGrpcStatus(status));
  }
  return WatchReactor::Start(options_.jobs, *request);
}

grpc::ServerUnaryReactor* TrainingServiceImpl::PauseJob(grpc::CallbackServerContext* context,
                                                        const v1::PauseJobRequest* request,
                                                        v1::Job* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    if (absl::Status s = CheckJobId(request->id()); !s.ok()) return s;
    return Assign(options_.jobs->Pause(request->id()), response);
  });
}

grpc::ServerUnaryReactor* TrainingServiceImpl::ResumeJob(grpc::CallbackServerContext* context,
                                                         const v1::ResumeJobRequest* request,
                                                         v1::Job* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    if (absl::Status s = CheckJobId(request->id()); !s.ok()) return s;
    return Assign(options_.jobs->Resume(request->id()), response);
  });
}

grpc::ServerUnaryReactor* TrainingServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                         const v1::CancelJobRequest* request,
                                                         v1::Job* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    if (absl::Status s = CheckJobId(request->id()); !s.ok()) return s;
    return Assign(options_.jobs->Cancel(request->id()), response);
  });
}

grpc::ServerUnaryReactor* TrainingServiceImpl::GetPlan(grpc::CallbackServerContext* context,
                                                       const v1::GetPlanRequest* request,
                                                       v1::Plan* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    if (absl::Status s = CheckJobId(request->id()); !s.ok()) return s;
    absl::StatusOr<PlanReport> plan = options_.jobs->GetPlan(request->id());
    if (!plan.ok()) return plan.status();
    *response = PlanToProto(request->id(), *plan, request->include_candidates());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TrainingServiceImpl::GetNode(grpc::CallbackServerContext* context,
                                                       const v1::GetNodeRequest* request,
                                                       v1::NodeInfo* response) {
  return Unary(context, [&]() -> absl::Status {
    if (absl::Status s = CheckAuth(*context); !s.ok()) return s;
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) response->set_hostname(ValidUtf8(host));
    response->set_daemon_version(ValidUtf8(options_.version));
    response->set_cpu_cores(static_cast<int32_t>(std::thread::hardware_concurrency()));
    if (absl::StatusOr<HostMemory> memory = ReadHostMemory(); memory.ok()) {
      response->set_host_memory_total_bytes(memory->total_bytes);
      response->set_host_memory_available_bytes(memory->available_bytes);
    }
    int index = 0;
    for (const NvidiaGpu& gpu : ReadNvidiaGpus()) {
      v1::GpuInfo* info = response->add_gpus();
      info->set_index(index++);
      info->set_name(ValidUtf8(gpu.name));
      info->set_bus_id(ValidUtf8(gpu.bus_id));
    }
    const NodeSnapshot node = options_.jobs->node_snapshot();
    FillMeasured(node, response->mutable_measured());
    response->set_running_job_id(ValidUtf8(node.running_job_id));
    response->set_queued_jobs(node.queued_jobs);
    return absl::OkStatus();
  });
}

}  // namespace slidedp::server
