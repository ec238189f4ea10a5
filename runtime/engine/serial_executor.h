// SerialExecutor: runs tasks one after another on its own thread, in the order pushed
// (a worker's landing thread: it waits for gradient copies to finish and hands the
// landed units to the update pipeline, so that the worker's thread never blocks on the
// device). With `inline_mode` (the CPU device) each task runs inside Push.
// Threads: Push/WaitIdle from one owner thread; tasks on the executor's thread.
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace slidedp {

class SerialExecutor {
 public:
  explicit SerialExecutor(bool inline_mode);
  ~SerialExecutor();  // runs what is queued, then joins

  // A task returns an error to stop the executor: later tasks are dropped and
  // WaitIdle returns the first error. Exceptions become Internal errors.
  void Push(std::function<absl::Status()> task);

  // Blocks until every pushed task has run; the first error since the last call.
  absl::Status WaitIdle();

 private:
  absl::Status RunOne(const std::function<absl::Status()>& task);
  void Loop();

  const bool inline_;
  absl::Mutex mu_;
  std::deque<std::function<absl::Status()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace slidedp
