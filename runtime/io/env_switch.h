// EnvSwitch: the process's A/B switches and escape hatches read from the environment
// (SLIDEDP_FUSED=0, SLIDEDP_WEIGHT_SINKS=0, SLIDEDP_ADMISSION=off, ...): whether a
// variable is set to one exact value. Each switch's owner
// reads it once (a function-local static) or per call, as it documents. Header-only,
// no LibTorch (CUDA sources include it); getenv's thread-safety: any thread, while no
// thread sets the environment.
#pragma once

#include <cstdlib>
#include <cstring>

namespace slidedp {

// True when the environment variable `name` is set to exactly `value`.
inline bool EnvIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

}  // namespace slidedp
