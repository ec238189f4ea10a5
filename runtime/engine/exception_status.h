// ExceptionStatus: what an exception escaping LibTorch or the standard library means
// for a job, as an absl::Status, so that the Trainer's public entry points return a
// status instead of letting it reach the job's thread (where an uncaught exception
// ends the process). An allocation that failed (std::bad_alloc, LibTorch's "tried to
// allocate" / "out of memory") is RESOURCE_EXHAUSTED; anything else INTERNAL. Plain
// functions; any thread.
#pragma once

#include "absl/strings/string_view.h"
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace slidedp {

// Inside a catch block only: the exception being handled as a status "WHAT: message"
// (LibTorch's message without its C++ backtrace, its first line, at most 512 bytes).
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
