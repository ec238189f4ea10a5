// One-line log messages on stderr with a UTC timestamp. Any thread (one fprintf per
// line, so lines do not interleave).
#pragma once

#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace slidedp::server {

inline void Log(absl::string_view message) {
  const std::string time = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::fprintf(stderr, "%s slidedpd: %.*s\n", time.c_str(), static_cast<int>(message.size()),
               message.data());
}

}  // namespace slidedp::server
