// SerialExecutor: see serial_executor.h.
#include "runtime/engine/serial_executor.h"

#include <exception>

#include "runtime/engine/exception_status.h"

namespace slidedp {

SerialExecutor::SerialExecutor(bool inline_mode) : inline_(inline_mode) {
  if (!inline_) thread_ = std::thread([this] { Loop(); });
}

SerialExecutor::~SerialExecutor() {
  if (inline_) return;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::Status SerialExecutor::RunOne(const std::function<absl::Status()>& task) {
  try {
    return task();
  } catch (const std::exception& e) {
    return absl::InternalError(ExceptionMessage(e));
  }
}

void SerialExecutor::Push(std::function<absl::Status()> task) {
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return;
  if (inline_) {
    error_ = RunOne(task);
    return;
  }
  queue_.push_back(std::move(task));
}

absl::Status SerialExecutor::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
  mu_.Await(absl::Condition(&idle));
  absl::Status s = error_;
  error_ = absl::OkStatus();
  return s;
}

void SerialExecutor::Loop() {
  for (;;) {
    std::function<absl::Status()> task;
    bool drop = false;
    {
      absl::MutexLock lock(&mu_);
      auto work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&work));
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = 1;
      drop = !error_.ok();
    }
    absl::Status s = drop ? absl::OkStatus() : RunOne(task);
    absl::MutexLock lock(&mu_);
    if (error_.ok() && !s.ok()) {
      error_ = s;
      queue_.clear();
    }
    running_ = 0;
  }
}

}  // namespace slidedp
