// Fault injection: test seams. One makes a worker's step fail the way a GPU
// out-of-memory does (std::runtime_error "out of memory", which the worker reports as
// RESOURCE_EXHAUSTED), so that the policy's shrink-and-retry path is testable on the
// CPU device; one makes the host state's allocation throw std::bad_alloc, as an
// allocation the admission did not foresee would; one makes a gradient landing fail
// with a given status. Process-wide and armed once; any thread (atomic).
#pragma once

#include "absl/status/status.h"

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

}  // namespace slidedp
