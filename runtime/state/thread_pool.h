// ThreadPool: a fixed set of persistent threads that runs one parallel-for at a time
// over [0, n) in fixed-size tiles and waits for it. Used by the CPU optimizer
// (runtime/state/adamw.cc); owns no work queue beyond the one running loop.
// Threads: ParallelFor may be called from any thread; concurrent calls are serialized
// (one loop runs at a time). The pool's own threads only run tiles of that loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace slidedp {

// Number of CPUs this process may run on (its affinity mask), at least 1.
int AvailableCpus();

class ThreadPool {
 public:
  using TileFn = absl::FunctionRef<void(int64_t begin, int64_t end)>;

  // A pool of `num_threads` threads in all: `num_threads - 1` are started here, the
  // caller of ParallelFor is the last one. `num_threads` < 1 counts as 1.
  explicit ThreadPool(int num_threads);
  // Joins the threads. Must not run concurrently with ParallelFor.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) once for every tile [k * tile, min((k + 1) * tile, n)) of
  // [0, n), on up to `max_threads` threads (the caller included; <= 0 or more than
  // num_threads(): all of them), and returns when every call has returned. Tile
  // boundaries depend only on `n` and `tile`, never on the thread count; which thread
  // runs which tile is unspecified. Requires tile >= 1. `fn` must not throw and must
  // not call ParallelFor of this pool (that would deadlock).
  void ParallelFor(int64_t n, int64_t tile, TileFn fn, int max_threads = 0);

 private:
  // One running loop. Lives on the caller's stack for the duration of ParallelFor.
  struct Loop {
    Loop(TileFn f, int64_t n, int64_t tile) : fn(f), n(n), tile(tile) {}
    TileFn fn;
    int64_t n;
    int64_t tile;
    std::atomic<int64_t> next_tile{0};
  };

  static void RunTiles(Loop& loop);
  void WorkerMain(int index);

  std::vector<std::thread> workers_;
  absl::Mutex call_mu_;  // held for the whole of a ParallelFor: one loop at a time
  absl::Mutex mu_;
  Loop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped for every loop
  int helpers_ ABSL_GUARDED_BY(mu_) = 0;          // workers [0, helpers_) join the loop
  int running_ ABSL_GUARDED_BY(mu_) = 0;          // helpers not yet done with the loop
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace slidedp
