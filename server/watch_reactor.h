// WatchReactor: the server stream of one WatchJob call. Subscribes to the job's
// events and writes them in order, one write in flight at a time; finishes after the
// job's last event (or when the client goes away). Deletes itself in OnDone.
// Threads: OnJobEvent runs on whichever thread changed the job (manager mutex held);
// the reactions run on gRPC's callback threads; mu_ orders them.
#pragma once

#include <cstdint>
#include <deque>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/job_manager.h"
#include "slidedp/v1/service.pb.h"

namespace slidedp::server {

class WatchReactor final : public grpc::ServerWriteReactor<v1::JobEvent>, public JobEventSink {
 public:
  // Step events queued beyond this many unwritten ones are dropped (a slow client);
  // state changes and the last event are always kept.
  static constexpr size_t kMaxPending = 10000;

  // Starts the watch; must be called in the method handler, before it returns the
  // reactor to gRPC (so no reaction can run before the subscription exists).
  static WatchReactor* Start(JobManager* jobs, const v1::WatchJobRequest& request);

  void OnJobEvent(const v1::JobEvent& event, bool last) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  explicit WatchReactor(JobManager* jobs) : jobs_(jobs) {}
  void MaybeWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishOnce(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobManager* const jobs_;
  absl::Mutex mu_;
  std::deque<v1::JobEvent> pending_ ABSL_GUARDED_BY(mu_);  // front() is being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool last_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t subscription_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace slidedp::server
