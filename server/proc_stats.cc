// /proc readers. Stateless; any thread.
#include "server/proc_stats.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace slidedp::server {
namespace {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "Key:   value ..." lines: the text after the colon, trimmed.
std::string ValueAfterColon(absl::string_view line) {
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return "";
  return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
}

}  // namespace

absl::StatusOr<double> ProcessCpuSeconds(const std::string& stat_path) {
  absl::StatusOr<std::string> text = ReadSmallFile(stat_path);
  if (!text.ok()) return text.status();
  // The command name (field 2) is in parentheses and may hold spaces: skip past it.
  const size_t close = text->rfind(')');
  if (close == std::string::npos) {
    return absl::DataLossError(absl::StrCat(stat_path, ": no ')' after the command name"));
  }
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*text).substr(close + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::DataLossError(absl::StrCat(stat_path, ": cannot read utime/stime"));
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  return static_cast<double>(utime + stime) / static_cast<double>(ticks > 0 ? ticks : 100);
}

absl::StatusOr<int64_t> ProcessResidentBytes(const std::string& statm_path) {
  absl::StatusOr<std::string> text = ReadSmallFile(statm_path);
  if (!text.ok()) return text.status();
  std::vector<absl::string_view> fields = absl::StrSplit(*text, ' ', absl::SkipEmpty());
  int64_t pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &pages)) {
    return absl::DataLossError(absl::StrCat(statm_path, ": cannot read the resident size"));
  }
  return pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

absl::StatusOr<HostCpuTimes> ReadHostCpuTimes(const std::string& stat_path) {
  absl::StatusOr<std::string> text = ReadSmallFile(stat_path);
  if (!text.ok()) return text.status();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::StartsWith(line, "cpu ")) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    // cpu user nice system idle iowait irq softirq steal [guest guest_nice]; guest time
    // is already counted in user.
    uint64_t v[8] = {};
    if (fields.size() < 9) break;
    for (int i = 0; i < 8; ++i) {
      if (!absl::SimpleAtoi(fields[i + 1], &v[i])) {
        return absl::DataLossError(absl::StrCat(stat_path, ": cannot parse \"", line, "\""));
      }
    }
    const long ticks = sysconf(_SC_CLK_TCK);
    const double tick = 1.0 / static_cast<double>(ticks > 0 ? ticks : 100);
    HostCpuTimes times;
    times.busy_seconds = static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * tick;
    times.total_seconds = times.busy_seconds + static_cast<double>(v[3] + v[4]) * tick;
    return times;
  }
  return absl::DataLossError(absl::StrCat(stat_path, ": no complete \"cpu \" line"));
}

absl::StatusOr<HostMemory> ReadHostMemory(const std::string& meminfo_path) {
  absl::StatusOr<std::string> text = ReadSmallFile(meminfo_path);
  if (!text.ok()) return text.status();
  HostMemory memory;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    int64_t* out = nullptr;
    if (absl::StartsWith(line, "MemTotal:")) out = &memory.total_bytes;
    if (absl::StartsWith(line, "MemAvailable:")) out = &memory.available_bytes;
    if (out == nullptr) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(ValueAfterColon(line), ' ');
    int64_t kib = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &kib)) {
      return absl::DataLossError(absl::StrCat(meminfo_path, ": cannot parse \"", line, "\""));
    }
    *out = kib * 1024;
  }
  if (memory.total_bytes == 0) {
    return absl::DataLossError(absl::StrCat(meminfo_path, ": no MemTotal line"));
  }
  return memory;
}

std::vector<NvidiaGpu> ReadNvidiaGpus(const std::string& dir) {
  std::vector<NvidiaGpu> gpus;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    absl::StatusOr<std::string> text = ReadSmallFile((entry.path() / "information").string());
    NvidiaGpu gpu;
    gpu.bus_id = entry.path().filename().string();
    if (text.ok()) {
      for (absl::string_view line : absl::StrSplit(*text, '\n')) {
        if (absl::StartsWith(line, "Model:")) gpu.name = ValueAfterColon(line);
        if (absl::StartsWith(line, "Bus Location:")) gpu.bus_id = ValueAfterColon(line);
      }
    }
    gpus.push_back(std::move(gpu));
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const NvidiaGpu& a, const NvidiaGpu& b) { return a.bus_id < b.bus_id; });
  return gpus;
}

}  // namespace slidedp::server
