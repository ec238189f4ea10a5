// ExceptionStatus: what an exception escaping LibTorch or the standard library means
// for a job, as an absl::Status, so that the Trainer's public entry points return a
// status instead of letting it reach the job's thread (where an uncaught exception
// ends the process). An allocation that failed (std::bad_alloc, LibTorch's "tried to
// allocate" / "out of memory") is RESOURCE_EXHAUSTED; anything else INTERNAL, except a
// StatusException, which carries its status (and code) through. Plain functions; any
// thread.
#pragma once

#include "absl/strings/string_view.h"
#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace slidedp {

// A failed absl::Status thrown through code that reports errors by exception (a
// worker's step, the NCCL communicator), so that its code (CANCELLED,
// RESOURCE_EXHAUSTED, ...) survives the way back to a status.
class StatusException : public std::exception {
 public:
  explicit StatusException(absl::Status status)
      : status_(std::move(status)), message_(status_.message()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  absl::Status status_;
  std::string message_;
};

// Throws StatusException(status) unless it is OK.
inline void ThrowIfError(absl::Status status) {
  if (!status.ok()) throw StatusException(std::move(status));
}

// The message of `e` as a status should carry it: a LibTorch error's without the C++
// backtrace its what() appends (kilobytes of frames), its first line, at most 512 bytes
// (cut between UTF-8 sequences, "..." appended).
std::string ExceptionMessage(const std::exception& e);

// Inside a catch block only: the exception being handled as a status "WHAT: message"
// (ExceptionMessage); a StatusException keeps its code.
absl::Status CurrentExceptionStatus(absl::string_view what);

// Runs fn() (which returns absl::Status or absl::StatusOr<T>) and turns an exception
// it throws into CurrentExceptionStatus(what).
template <typename Fn>
auto GuardExceptions(absl::string_view what, Fn&& fn) -> decltype(fn()) {
  try {
    return std::forward<Fn>(fn)();
  } catch (...) {
    return CurrentExceptionStatus(what);
  }
}

}  // namespace slidedp
