// StopToken: a request to stop a job's work early (a cancel, a daemon shutdown), set
// once from any thread and read by the long loops of the job's thread and its helper
// threads (evaluation, tokenization, model loading, calibration, the step's units).
// A loop that sees it returns absl::CancelledError naming what it stopped. Thread-safe
// (one atomic flag); checking is a relaxed-enough load, cheap enough for every line of
// a data file.
#pragma once

#include <atomic>
#include <cstddef>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slidedp {

class StopToken {
 public:
  // From any thread; idempotent. There is no reset: a stopped job is not resumed with
  // the same token.
  void RequestStop() { stopped_.store(true, std::memory_order_release); }
  bool stop_requested() const { return stopped_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> stopped_{false};
};

// How much data a loop over bytes (hashing, reading, writing) handles between two stop
// checks: 64 MiB, a few tens of milliseconds at memory or disk speed.
inline constexpr size_t kStopCheckBytes = size_t{64} << 20;

// True when `token` (may be null: never stops) has been asked to stop.
inline bool StopRequested(const StopToken* token) { return token != nullptr && token->stop_requested(); }

// CANCELLED "WHAT: stopped (cancel or shutdown requested)" when `token` asks to stop,
// else OK.
inline absl::Status CheckStop(const StopToken* token, absl::string_view what) {
  if (!StopRequested(token)) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat(what, ": stopped (cancel or shutdown requested)"));
}

}  // namespace slidedp
