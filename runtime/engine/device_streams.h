// DeviceStreams: one worker's compute, H2D, D2H and collective streams and the events
// that order them (DESIGN.md, "Streams per GPU"). Work on different streams overlaps;
// a stream waits for another only through an event, never through a host sync. On the
// CPU device there is one stream, the calling thread: work is complete when issued and
// every event has already happened, so the same step code runs on both devices.
// Threads: Use/Record/Wait from the owning worker's thread; HostWait and the trace
// queries from its landing thread or after the step.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace slidedp {

enum class StreamKind { kCompute = 0, kH2D = 1, kD2H = 2, kCollective = 3 };
inline constexpr int kNumStreamKinds = 4;
const char* StreamName(StreamKind k);

// A point in one stream's work. Default-constructed: already happened.
class Event {
 public:
  Event() = default;
  explicit Event(std::shared_ptr<void> impl) : impl_(std::move(impl)) {}
  void* impl() const { return impl_.get(); }
  bool pending() const { return impl_ != nullptr; }

 private:
  std::shared_ptr<void> impl_;
};

// Makes one stream the calling thread's current LibTorch stream while alive.
class StreamUse {
 public:
  virtual ~StreamUse() = default;
};

class DeviceStreams {
 public:
  // CPU device: trivial streams. CUDA device: four streams from LibTorch's pool of that
  // GPU; FailedPrecondition if this build has no CUDA. `timing` enables the events'
  // timestamps (for --trace), at a small cost.
  static absl::StatusOr<std::unique_ptr<DeviceStreams>> Create(const at::Device& device, bool timing);
  virtual ~DeviceStreams() = default;

  virtual bool is_cuda() const = 0;
  [[nodiscard]] virtual std::unique_ptr<StreamUse> Use(StreamKind k) = 0;
  // An event after everything issued to `k` so far.
  virtual Event Record(StreamKind k) = 0;
  // Work issued to `k` after this call starts after `e`.
  virtual void Wait(StreamKind k, const Event& e) = 0;
  // Tells the allocator that `t` (a device tensor) is used by work on `k`, so that its
  // memory is not reused before that work is done once the last reference is dropped.
  virtual void KeepFor(const at::Tensor& t, StreamKind k) = 0;
  // Blocks the calling thread until `e` has happened (landing thread, step end).
  virtual void HostWait(const Event& e) = 0;
  // Trace: marks the time origin on the compute stream; MillisSince gives an event's
  // time after the origin, once the event has happened (0 without timing or on CPU).
  virtual void MarkOrigin() = 0;
  virtual double MillisSinceOrigin(const Event& e) = 0;
  // Device memory: currently allocated by LibTorch, peak since the last ResetPeak (of
  // tensors; and of what LibTorch's caching allocator held, tensors plus its cached and
  // fragmented blocks: what the driver saw), and the device's capacity (all 0 on the CPU
  // device).
  virtual int64_t MemoryAllocated() = 0;
  virtual int64_t MemoryPeak() = 0;
  virtual int64_t MemoryReservedPeak() = 0;
  virtual int64_t MemoryTotal() = 0;
  // What this process can still allocate on the device: the driver's free memory plus
  // what LibTorch's cache holds unused (0 on the CPU device).
  virtual int64_t MemoryAvailable() = 0;
  virtual void ResetPeak() = 0;
  // Profiling: a named NVTX start/end range around the work one unit issues (the
  // worker's "forward block 5"), so that ncu and nsys can select one unit's kernels
  // (`ncu --nvtx --nvtx-include "forward block 5"`). A process-wide range, not a
  // thread's push/pop: backward's kernels are launched by autograd's device thread, which
  // a push/pop range of the worker's thread does not cover. Only with SLIDEDP_NVTX=1 in
  // the environment and on CUDA; otherwise nothing. Ranges do not nest: a start ends the
  // previous one's scope only at its own RangeEnd.
  virtual void RangeStart(const std::string& /*name*/) {}
  virtual void RangeEnd() {}
};

// Defined in device_streams_cuda.cc when LibTorch has CUDA, else returns an error.
absl::StatusOr<std::unique_ptr<DeviceStreams>> CreateCudaStreams(const at::Device& device, bool timing);

}  // namespace slidedp
