// Fault injection: test seams. One makes a worker's step fail the way a GPU
// out-of-memory does (LibTorch's c10::OutOfMemoryError "CUDA out of memory", its
// backtrace and all, which the worker reports as RESOURCE_EXHAUSTED), so that the
// policy's shrink-and-retry path is testable on the CPU device; one makes the host
// state's allocation throw std::bad_alloc, as an allocation the admission did not
// foresee would; one makes a gradient landing fail with a given status; and one records
// the order in which workers fetch, take and release their parameter slots, to check it
// against the StepSchedule. Process-wide and armed once; any thread (atomic, the record
// locked).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "runtime/plan/step_schedule.h"

namespace slidedp {

// The next worker step to take `grad_buffers + 1` gradient buffers fails when it takes
// that one (after `grad_buffers` units' gradients were started, some of them landed).
void InjectOutOfMemory(int grad_buffers);

// Worker, before it takes a gradient buffer: throws the injected error when armed and due.
void MaybeInjectOutOfMemory();

// The next Trainer::Create throws std::bad_alloc where it allocates the host state.
void InjectHostAllocationFailure();

// Trainer::Create, before it allocates the host state: throws when armed (and disarms).
void MaybeInjectHostAllocationFailure();

// The next gradient landing of any worker fails with `status` (not OK) on the landing
// thread, as a failed collective would.
void InjectLandingFailure(absl::Status status);

// The landing thread, before it completes a landing: the injected status when armed
// (and disarms), else OK.
absl::Status MaybeInjectLandingFailure();

// One worker's slot event (StepSchedule::Event) of step `step` (RunStep and RunEval).
struct RecordedSlotEvent {
  int rank = 0;
  int64_t step = 0;
  StepSchedule::Event event;
};

// While `log` is set (nullptr: stop), every worker appends its slot events to it.
void RecordSlotEvents(std::vector<RecordedSlotEvent>* log);

// Worker: appends the event when recording.
void MaybeRecordSlotEvent(int rank, int64_t step, StepSchedule::Event event);

}  // namespace slidedp
