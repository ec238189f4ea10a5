// The Communicator of a job's GPUs: NCCL collectives on the calling thread's current
// LibTorch stream (the worker's collective stream), with NcclGroup's watchdog. Errors
// (a failed call, an asynchronous NCCL error, a collective past the timeout) are thrown
// as std::runtime_error from the collective, which the worker turns into the job's
// error. Buffers must hold world * SliceLength(n, world) elements (the workers' slots
// and gradient buffers are allocated padded).
// Threads: rank r's calls from rank r's worker thread.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/engine/communicator.h"

namespace slidedp {

// FailedPrecondition where this build has no CUDA LibTorch or no NCCL.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int world, double timeout_seconds);

}  // namespace slidedp
