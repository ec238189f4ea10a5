// TrainingServiceImpl: the slidedp.v1.TrainingService handlers (gRPC callback API).
// Handlers only check the caller's token, validate, translate and return; the work is
// the JobManager's. Called concurrently from gRPC's threads; holds no mutable state.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

#include "server/job_manager.h"
#include "server/path_policy.h"
#include "server/peer_policy.h"
#include "slidedp/v1/service.grpc.pb.h"

namespace slidedp::server {

struct ServiceOptions {
  JobManager* jobs = nullptr;          // required; outlives the service
  const PathPolicy* paths = nullptr;   // required; outlives the service
  std::string bearer_token;            // empty: no token required
  std::string version;
  int rpc_nice = 0;  // nice added to each gRPC thread that runs a handler (thread_priority.h)
  const PeerPolicy* peers = &PeerPolicy::None();  // the hosts jobs of several hosts may name; outlives the service
};

class TrainingServiceImpl final : public v1::TrainingService::CallbackService {
 public:
  explicit TrainingServiceImpl(ServiceOptions options) : options_(std::move(options)) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const v1::SubmitJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                   const v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* PauseJob(grpc::CallbackServerContext* context,
                                     const v1::PauseJobRequest* request,
                                     v1::Job* response) override;
  grpc::ServerUnaryReactor* ResumeJob(grpc::CallbackServerContext* context,
                                      const v1::ResumeJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* context,
                                    const v1::GetNodeRequest* request,
                                    v1::NodeInfo* response) override;
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* context,
                                    const v1::GetPlanRequest* request,
                                    v1::Plan* response) override;

 private:
  // UNAUTHENTICATED unless the call carries "authorization: Bearer <token>".
  absl::Status CheckAuth(const grpc::CallbackServerContext& context) const;

  const ServiceOptions options_;
};

// INVALID_ARGUMENT naming `field` unless `id` is 1..128 printable ASCII characters.
absl::Status CheckJobId(const std::string& id, absl::string_view field = "id");

// Compares in time independent of where the strings differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace slidedp::server
