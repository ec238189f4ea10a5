// Fault injection: see fault_injection.h.
#include "runtime/engine/fault_injection.h"

#include <atomic>
#include <new>
#include <stdexcept>

namespace slidedp {
namespace {

// Gradient buffers left before the failure; -1: disarmed.
std::atomic<int> countdown{-1};
std::atomic<bool> host_allocation{false};

}  // namespace

void InjectOutOfMemory(int grad_buffers) { countdown.store(grad_buffers); }

void MaybeInjectOutOfMemory() {
  int left = countdown.load();
  while (left >= 0) {
    if (countdown.compare_exchange_weak(left, left - 1)) {
      if (left == 0) throw std::runtime_error("CUDA out of memory (injected by a test)");
      return;
    }
  }
}

void InjectHostAllocationFailure() { host_allocation.store(true); }

void MaybeInjectHostAllocationFailure() {
  if (host_allocation.exchange(false)) throw std::bad_alloc();
}

}  // namespace slidedp
