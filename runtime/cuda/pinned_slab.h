// PinnedSlab: one block of page-locked host memory of exactly the asked size, from the
// CUDA driver (cudaHostAlloc); and PageLock, which locks memory allocated elsewhere.
// LibTorch's pinned allocator rounds every allocation up to a power of two (a 0.66 GB
// unit of a 14B model takes 1 GiB), which costs a large model tens of GB of host
// memory; the host state takes its pinned buffers from one slab instead. Needs only the CUDA toolkit (no LibTorch). The memory is freed when the last
// shared_ptr to it goes; any thread.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace slidedp {

// `bytes` of page-locked host memory, not initialized; RESOURCE_EXHAUSTED naming the
// size when the driver cannot pin that much, UNIMPLEMENTED in a build without the CUDA
// toolkit.
absl::StatusOr<std::shared_ptr<void>> AllocatePinnedSlab(size_t bytes);

// Page-locks the `bytes` of host memory at `p`, already allocated (cudaHostRegister),
// until the returned handle goes (cudaHostUnregister); the memory must outlive it.
// RESOURCE_EXHAUSTED naming the size when the driver cannot lock it.
absl::StatusOr<std::shared_ptr<void>> PageLock(void* p, size_t bytes);

}  // namespace slidedp
