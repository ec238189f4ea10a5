// LoadDriver: many concurrent gRPC clients against a running slidedpd, each on its own
// channel, paced at a fixed rate: GetJob on a watched job every tick (timed), ListJobs
// every 5th tick (timed), a WatchJob stream opened and dropped after its snapshot every
// 10th, and a tiny job submitted and cancelled every 40th. For the load test and the
// load benchmark. RunLoad blocks the calling thread for the duration.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace slidedp::server::testing {

struct LoadOptions {
  std::string address;  // e.g. "127.0.0.1:5123"
  std::string token;    // bearer token, if the daemon wants one
  std::string job_id;   // the job GetJob and WatchJob ask about
  int clients = 50;
  std::chrono::milliseconds duration{10000};
  double ticks_per_second = 20.0;  // per client
};

struct LoadResult {
  int64_t get_calls = 0, list_calls = 0, watch_calls = 0, submit_calls = 0;
  int64_t errors = 0;
  std::string first_error;
  double get_p50_ms = 0, get_p99_ms = 0, get_max_ms = 0;
  double list_p50_ms = 0, list_p99_ms = 0;
  double seconds = 0;  // wall time of the run
};

LoadResult RunLoad(const LoadOptions& options);

std::string Describe(const LoadResult& r);

}  // namespace slidedp::server::testing
