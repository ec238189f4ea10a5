// ThreadPool: see thread_pool.h. Workers sleep on the pool's mutex between loops; a
// loop wakes only the workers it uses, and every participant (caller included) claims
// tiles from one atomic counter, so an unevenly slow thread does not stall the loop.
#include "runtime/state/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace slidedp {

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int num_threads) {
  const int workers = std::max(1, num_threads) - 1;
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { WorkerMain(i); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunTiles(Loop& loop) {
  const int64_t num_tiles = (loop.n + loop.tile - 1) / loop.tile;
  for (;;) {
    const int64_t k = loop.next_tile.fetch_add(1, std::memory_order_relaxed);
    if (k >= num_tiles) return;
    const int64_t begin = k * loop.tile;
    loop.fn(begin, std::min(loop.n, begin + loop.tile));
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t tile, TileFn fn, int max_threads) {
  if (n <= 0) return;
  tile = std::max<int64_t>(tile, 1);
  Loop loop(fn, n, tile);
  const int64_t num_tiles = (n + tile - 1) / tile;
  const int limit = max_threads <= 0 ? num_threads() : std::min(max_threads, num_threads());
  const int helpers = static_cast<int>(std::min<int64_t>(limit, num_tiles)) - 1;
  if (helpers <= 0) {  // no hand-off: no locks, so single-threaded callers never wait
    RunTiles(loop);
    return;
  }
  absl::MutexLock call_lock(&call_mu_);
  {
    absl::MutexLock lock(&mu_);
    loop_ = &loop;
    helpers_ = helpers;
    running_ = helpers;
    ++generation_;
  }
  RunTiles(loop);
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
  mu_.Await(absl::Condition(&done));
  loop_ = nullptr;  // `loop` dies with this frame; no helper touches it any more
}

void ThreadPool::WorkerMain(int index) {
  uint64_t seen = 0;
  for (;;) {
    Loop* loop = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (generation_ != seen && index < helpers_);
      };
      mu_.Await(absl::Condition(&wake));
      if (stop_) return;
      seen = generation_;
      loop = loop_;
    }
    RunTiles(*loop);
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace slidedp
