// WatchReactor: server-streaming WatchJob. See the header for the threading.
#include "server/watch_reactor.h"

#include "server/grpc_status.h"

namespace slidedp::server {

WatchReactor* WatchReactor::Start(JobManager* jobs, const v1::WatchJobRequest& request) {
  auto* reactor = new WatchReactor(jobs);
  // Subscribe delivers the snapshot synchronously, through OnJobEvent (which takes
  // mu_), so mu_ must not be held here.
  absl::StatusOr<int64_t> handle = jobs->Subscribe(request.id(), request.replay(), reactor);
  absl::MutexLock lock(&reactor->mu_);
  if (!handle.ok()) {
    reactor->FinishOnce(ToGrpcStatus(handle.status()));
  } else {
    reactor->subscribed_ = true;
    reactor->subscription_ = *handle;
  }
  return reactor;
}

void WatchReactor::OnJobEvent(const v1::JobEvent& event, bool last) {
  absl::MutexLock lock(&mu_);
  if (finished_ || last_queued_) return;
  const bool droppable = event.type() == v1::JobEvent::TYPE_STEP && !last;
  if (droppable && pending_.size() >= kMaxPending) return;
  pending_.push_back(event);
  last_queued_ = last;
  MaybeWrite();
}

void WatchReactor::MaybeWrite() {
  if (writing_ || finished_) return;
  if (!pending_.empty()) {
    writing_ = true;
    StartWrite(&pending_.front());  // deque::push_back keeps front() valid
    return;
  }
  if (last_queued_) FinishOnce(grpc::Status::OK);
}

void WatchReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!pending_.empty()) pending_.pop_front();
  if (!ok) {
    FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream broke"));
    return;
  }
  MaybeWrite();
}

void WatchReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  FinishOnce(grpc::Status::CANCELLED);
}

void WatchReactor::FinishOnce(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  Finish(status);
}

void WatchReactor::OnDone() {
  bool subscribed;
  int64_t subscription;
  {
    absl::MutexLock lock(&mu_);
    subscribed = subscribed_;
    subscription = subscription_;
  }
  // After Unsubscribe returns no OnJobEvent is running or will run.
  if (subscribed) jobs_->Unsubscribe(subscription);
  delete this;
}

}  // namespace slidedp::server
