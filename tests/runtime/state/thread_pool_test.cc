// ThreadPool: every tile runs exactly once with tiling independent of the thread count,
// for any limit, and concurrent callers are serialized safely.
#include "runtime/state/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace slidedp {
namespace {

// Runs one loop and returns the (begin, end) pairs seen, checking each index once.
std::set<std::pair<int64_t, int64_t>> RunAndCollect(ThreadPool& pool, int64_t n, int64_t tile,
                                                    int max_threads) {
  std::vector<std::atomic<int>> hits(n);
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> tiles;
  pool.ParallelFor(
      n, tile,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        tiles.insert({b, e});
      },
      max_threads);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "index " << i;
  return tiles;
}

TEST(ThreadPoolTest, EveryTileOnceWithTheSameBoundariesForAnyThreadCount) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.num_threads(), 4);
  const int64_t n = 1003, tile = 100;
  std::set<std::pair<int64_t, int64_t>> want;
  for (int64_t b = 0; b < n; b += tile) want.insert({b, std::min(n, b + tile)});
  for (int max_threads : {0, 1, 2, 3, 4, 9}) {
    EXPECT_EQ(RunAndCollect(pool, n, tile, max_threads), want) << max_threads;
  }
}

TEST(ThreadPoolTest, UsesSeveralThreadsWhenAllowed) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> inside{0};
  pool.ParallelFor(3, 1, [&](int64_t, int64_t) {
    // Each tile waits (bounded) until all three threads are inside: proves they overlap.
    inside.fetch_add(1);
    for (int spin = 0; spin < 2000 && inside.load() < 3; ++spin) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ThreadPoolTest, LimitOfOneRunsOnTheCaller) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  pool.ParallelFor(
      50, 5, [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), caller); }, 1);
}

TEST(ThreadPoolTest, EmptyRangeAndSingleThreadPool) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.num_threads(), 1);
  int calls = 0;
  pool.ParallelFor(0, 10, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  RunAndCollect(pool, 77, 10, 0);
}

TEST(ThreadPoolTest, ConcurrentCallersAreSerialized) {
  ThreadPool pool(3);
  std::atomic<int> active_loops{0}, max_active{0};
  auto caller = [&] {
    for (int r = 0; r < 50; ++r) {
      std::atomic<int64_t> sum{0};
      pool.ParallelFor(1000, 10, [&](int64_t b, int64_t e) {
        const int now = active_loops.fetch_add(1) + 1;
        int seen = max_active.load();
        while (now > seen && !max_active.compare_exchange_weak(seen, now)) {
        }
        for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
        active_loops.fetch_sub(1);
      });
      EXPECT_EQ(sum.load(), 999 * 1000 / 2);
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_LE(max_active.load(), 3);  // never more tiles at once than one loop's threads
}

}  // namespace
}  // namespace slidedp
