// Fault injection: see fault_injection.h.
#include "runtime/engine/fault_injection.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <new>

#include "absl/synchronization/mutex.h"

namespace slidedp {
namespace {

// Gradient buffers left before the failure; -1: disarmed.
std::atomic<int> countdown{-1};
std::atomic<bool> host_allocation{false};
std::atomic<bool> landing_armed{false};
std::atomic<std::vector<RecordedSlotEvent>*> slot_log{nullptr};

ABSL_CONST_INIT absl::Mutex mu(absl::kConstInit);

absl::Status& LandingFailure() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  static absl::Status* const status = new absl::Status();
  return *status;
}

}  // namespace

void InjectOutOfMemory(int grad_buffers) { countdown.store(grad_buffers); }

void MaybeInjectOutOfMemory() {
  int left = countdown.load();
  while (left >= 0) {
    if (countdown.compare_exchange_weak(left, left - 1)) {
      // As LibTorch's CUDA allocator reports it: a c10::OutOfMemoryError, whose what()
      // carries a C++ backtrace after the message.
      if (left == 0) {
        TORCH_CHECK_WITH(OutOfMemoryError, false,
                         "CUDA out of memory. Tried to allocate 2.00 GiB (injected by a test)");
      }
      return;
    }
  }
}

void InjectHostAllocationFailure() { host_allocation.store(true); }

void MaybeInjectHostAllocationFailure() {
  if (host_allocation.exchange(false)) throw std::bad_alloc();
}

void InjectLandingFailure(absl::Status status) {
  absl::MutexLock lock(&mu);
  LandingFailure() = std::move(status);
  landing_armed.store(!LandingFailure().ok());
}

absl::Status MaybeInjectLandingFailure() {
  if (!landing_armed.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu);
  if (!landing_armed.exchange(false)) return absl::OkStatus();
  return LandingFailure();
}

void RecordSlotEvents(std::vector<RecordedSlotEvent>* log) {
  absl::MutexLock lock(&mu);
  slot_log.store(log);
}

void MaybeRecordSlotEvent(int rank, int64_t step, StepSchedule::Event event) {
  if (slot_log.load(std::memory_order_relaxed) == nullptr) return;
  absl::MutexLock lock(&mu);
  if (std::vector<RecordedSlotEvent>* log = slot_log.load()) log->push_back({rank, step, event});
}

}  // namespace slidedp
