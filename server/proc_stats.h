// Readers of /proc for process and host figures (CPU time, memory, NVIDIA GPUs).
// Stateless; any thread. Each takes the file or directory to read so tests can point
// it at fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace slidedp::server {

// User + system CPU seconds of the process, from /proc/self/stat (fields 14 and 15).
absl::StatusOr<double> ProcessCpuSeconds(const std::string& stat_path = "/proc/self/stat");

// Resident set size in bytes, from /proc/self/statm (second field, in pages).
absl::StatusOr<int64_t> ProcessResidentBytes(const std::string& statm_path = "/proc/self/statm");

// Cumulative CPU time of the whole host, from the "cpu" line of /proc/stat, in seconds
// summed over cores: busy = user + nice + system + irq + softirq + steal; total also
// counts idle and iowait.
struct HostCpuTimes {
  double busy_seconds = 0.0;
  double total_seconds = 0.0;
};
absl::StatusOr<HostCpuTimes> ReadHostCpuTimes(const std::string& stat_path = "/proc/stat");

struct HostMemory {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
};
// MemTotal and MemAvailable of /proc/meminfo.
absl::StatusOr<HostMemory> ReadHostMemory(const std::string& meminfo_path = "/proc/meminfo");

struct NvidiaGpu {
  std::string name;    // "Model:" line
  std::string bus_id;  // "Bus Location:" line, or the directory name
};
// One entry per directory of /proc/driver/nvidia/gpus (sorted by bus id); empty when
// the driver is absent.
std::vector<NvidiaGpu> ReadNvidiaGpus(const std::string& dir = "/proc/driver/nvidia/gpus");

}  // namespace slidedp::server
