// MonotonicSeconds: the steady clock in seconds, for the step's timings. Any thread.
#pragma once

#include <chrono>

namespace slidedp {

inline double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace slidedp
