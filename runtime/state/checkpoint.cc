// Checkpoint files: see checkpoint.h. Plain POSIX I/O so that every failure (ENOSPC,
// EFBIG, EIO) is seen where it happens and named with the file.
#include "runtime/state/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/io/file_access.h"
#include "runtime/io/stop_token.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kMagic[8] = {'S', 'L', 'D', 'P', 'C', 'K', 'P', 'T'};
constexpr char kEndMagic[8] = {'S', 'L', 'D', 'P', 'E', 'N', 'D', '\0'};
constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;
constexpr const char* kPrefix = "ckpt-";
constexpr const char* kSuffix = ".slidedp";

// Whether a unit name in a file's header is the model's `name`. Checkpoints written
// before units had one name (UnitName) call block 3 "block.3": they still read.
bool SameUnitName(const std::string& in_file, const std::string& name) {
  if (in_file == name) return true;
  return absl::StartsWith(in_file, "block.") && absl::StartsWith(name, "block ") &&
         in_file.substr(6) == name.substr(6);
}

// 64-bit word-wise FNV-style checksum: fast enough for tens of GB (8 bytes per multiply),
// and any split of the input into Update() calls gives the same result.
class Checksum {
 public:
  void Update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += n;
    while (n > 0 && pending_n_ > 0) {
      pending_[pending_n_++] = *p++;
      --n;
      if (pending_n_ == 8) Word(pending_), pending_n_ = 0;
    }
    for (; n >= 8; p += 8, n -= 8) Word(p);
    while (n-- > 0) pending_[pending_n_++] = *p++;
  }
  uint64_t Final() const {
    uint64_t h = h_;
    for (size_t i = 0; i < pending_n_; ++i) h = (h ^ pending_[i]) * kPrime;
    return (h ^ total_) * kPrime;
  }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  void Word(const unsigned char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h_ = (h_ ^ w) * kPrime;
    h_ ^= h_ >> 29;
  }
  uint64_t h_ = 0xcbf29ce484222325ULL;
  uint64_t total_ = 0;
  unsigned char pending_[8] = {};
  size_t pending_n_ = 0;
};

std::string Errno(int e) { return std::strerror(e); }

// Closes the descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status WriteAll(int fd, const std::string& path, const void* data, size_t n, Checksum* sum) {
  if (sum != nullptr) sum->Update(data, n);
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t piece = std::min<size_t>(n, size_t{1} << 26);
    const ssize_t w = ::write(fd, p, piece);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int e = errno;
      std::string hint = (e == ENOSPC || e == EFBIG || e == EDQUOT)
                             ? " (the disk or the file size limit is full; the previous checkpoint is kept)"
                             : "";
      return absl::ResourceExhaustedError(absl::StrCat("writing checkpoint ", path, ": ", Errno(e), hint));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, const std::string& path, void* data, size_t n, Checksum* sum) {
  auto* p = static_cast<char*>(data);
  size_t left = n;
  while (left > 0) {
    const ssize_t r = ::read(fd, p, std::min<size_t>(left, size_t{1} << 26));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::DataLossError(absl::StrCat("reading checkpoint ", path, ": ", Errno(errno)));
    if (r == 0) return absl::DataLossError(absl::StrCat("checkpoint ", path, " is truncated"));
    p += r;
    left -= static_cast<size_t>(r);
  }
  if (sum != nullptr) sum->Update(data, n);
  return absl::OkStatus();
}

// The step of a checkpoint file name, or -1 if `name` is not one.
int64_t StepOfName(const std::string& name) {
  if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) return -1;
  const std::string digits =
      name.substr(std::strlen(kPrefix), name.size() - std::strlen(kPrefix) - std::strlen(kSuffix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  int64_t step = -1;
  return absl::SimpleAtoi(digits, &step) ? step : -1;
}

std::string HeaderJson(const CheckpointMeta& meta, const std::vector<CheckpointUnit>& units) {
  json units_json = json::array();
  for (const CheckpointUnit& u : units) units_json.push_back({{"name", u.name}, {"numel", u.numel}});
  const MomentDtype moments = units.empty() ? MomentDtype::kFp32 : units[0].moments.dtype;
  json h = {{"format", "slidedp.checkpoint"},
            {"step", meta.step},
            {"adam_steps", meta.adam_steps},
            {"tokens_seen", meta.tokens_seen},
            {"skipped_steps", meta.skipped_steps},
            {"bad_steps_in_row", meta.bad_steps_in_row},
            {"seed", meta.seed},
            {"data_cursor", meta.data_cursor},
            {"config", meta.config_json},
            {"run_id", meta.run_id},
            {"moment_dtype", NameOf(moments)},
            {"units", units_json}};
  return h.dump();
}

struct Header {
  CheckpointMeta meta;
  MomentDtype moments = MomentDtype::kFp32;
  std::vector<std::pair<std::string, int64_t>> units;
  uint64_t bytes = 0;  // file bytes up to the end of the header
};

template <typename T>
absl::Status Get(const json& h, const char* key, const std::string& path, T* out) {
  auto it = h.find(key);
  bool ok = it != h.end();
  if constexpr (std::is_same_v<T, std::string>) {
    ok = ok && it->is_string();
  } else if constexpr (std::is_unsigned_v<T>) {
    ok = ok && it->is_number_unsigned();
  } else {
    ok = ok && it->is_number_integer();
  }
  if (!ok) return absl::DataLossError(absl::StrCat("checkpoint ", path, ": header field '", key, "' is missing or mistyped"));
  *out = it->get<T>();
  return absl::OkStatus();
}

absl::StatusOr<Header> ParseHeader(const std::string& path, const std::string& text) {
  // Deep nesting would exhaust the stack in the JSON library's recursive parts.
  if (JsonNestingExceeded(text, kMaxJsonNesting) != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", EchoPath(path), ": the header is JSON nested deeper than ",
                                            kMaxJsonNesting, " levels"));
  }
  json h = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": the header is not a JSON object"));
  }
  Header out;
  CheckpointMeta& m = out.meta;
  for (absl::Status s : {Get(h, "step", path, &m.step), Get(h, "adam_steps", path, &m.adam_steps),
                         Get(h, "tokens_seen", path, &m.tokens_seen),
                         Get(h, "skipped_steps", path, &m.skipped_steps),
                         Get(h, "bad_steps_in_row", path, &m.bad_steps_in_row),
                         Get(h, "seed", path, &m.seed), Get(h, "data_cursor", path, &m.data_cursor),
                         Get(h, "config", path, &m.config_json)}) {
    if (!s.ok()) return s;
  }
  // Absent in checkpoints written before run ids were recorded: no run id.
  if (h.contains("run_id")) {
    if (absl::Status s = Get(h, "run_id", path, &m.run_id); !s.ok()) return s;
  }
  // Absent in checkpoints written before compact moments: fp32.
  if (h.contains("moment_dtype")) {
    std::string name;
    if (absl::Status s = Get(h, "moment_dtype", path, &name); !s.ok()) return s;
    const std::optional<MomentDtype> parsed = EnumFromName<MomentDtype>(name);
    if (parsed) out.moments = *parsed;
    if (!parsed) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path, ": unknown moment_dtype '", Echo(name), "'"));
    }
  }
  auto units = h.find("units");
  if (units == h.end() || !units->is_array()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": header field 'units' is missing"));
  }
  for (const json& u : *units) {
    std::string name;
    int64_t numel = 0;
    if (!u.is_object()) return absl::DataLossError(absl::StrCat("checkpoint ", path, ": a unit is not an object"));
    if (absl::Status s = Get(u, "name", path, &name); !s.ok()) return s;
    if (absl::Status s = Get(u, "numel", path, &numel); !s.ok()) return s;
    if (numel < 0 || numel > (int64_t{1} << 40)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path, ": unit ", Echo(name), " has numel ", numel));
    }
    out.units.emplace_back(std::move(name), numel);
  }
  return out;
}

absl::StatusOr<Header> ReadHeader(int fd, const std::string& path, Checksum* sum) {
  char magic[8];
  uint32_t version[2];
  uint64_t header_bytes = 0;
  if (absl::Status s = ReadAll(fd, path, magic, 8, sum); !s.ok()) return s;
  if (std::memcmp(magic, kMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(path, " is not a slidedp checkpoint (bad magic)"));
  }
  if (absl::Status s = ReadAll(fd, path, version, 8, sum); !s.ok()) return s;
  if (version[0] != kCheckpointVersion) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " has version ", version[0],
                                                      "; this build reads version ", kCheckpointVersion));
  }
  if (absl::Status s = ReadAll(fd, path, &header_bytes, 8, sum); !s.ok()) return s;
  if (header_bytes > kMaxHeaderBytes) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": header of ", header_bytes, " bytes"));
  }
  std::string text(header_bytes, '\0');
  if (absl::Status s = ReadAll(fd, path, text.data(), text.size(), sum); !s.ok()) return s;
  absl::StatusOr<Header> h = ParseHeader(path, text);
  if (h.ok()) h->bytes = 24 + header_bytes;
  return h;
}

// Deletes all but the `keep` newest checkpoints of run `run_id` in `dir`, never `written`
// (the one just written, even when a newer one of the run is kept: e.g. a corrupt one a
// resume passed over). Checkpoints of other runs and files whose header does not read
// (owner unknown) are left alone. Files are removed by name through `dir_fd`, the folder
// the checkpoint was just written into (checked against the roots when it was opened),
// so a folder swapped for a symlink since cannot lead the deletions elsewhere. Best
// effort: a failure here loses nothing.
void PruneRun(int dir_fd, const std::string& dir, const std::string& run_id, const std::string& written,
              int keep) {
  absl::StatusOr<std::vector<std::string>> all = ListCheckpoints(dir);
  if (!all.ok()) return;
  std::vector<std::string> own;  // oldest first, `written` included
  for (const std::string& path : *all) {
    if (path != written) {
      absl::StatusOr<CheckpointMeta> m = ReadCheckpointMeta(path);
      if (!m.ok() || m->run_id != run_id) continue;
    }
    own.push_back(path);
  }
  for (size_t i = 0; i + std::max(keep, 1) < own.size(); ++i) {
    if (own[i] != written) ::unlinkat(dir_fd, fs::path(own[i]).filename().c_str(), 0);
  }
}

// Opens checkpoint `path` for reading: never blocks, regular files only, inside the read
// roots (runtime/io/file_access.h).
absl::StatusOr<UniqueFd> OpenCheckpoint(const std::string& path) {
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(path);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat("opening checkpoint: ", fd.status().message()));
  }
  return fd;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return (fs::path(dir) / absl::StrFormat("%s%09d%s", kPrefix, step, kSuffix)).string();
}

absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& dir) {
  std::error_code ec;
  std::vector<std::pair<int64_t, std::string>> found;
  if (!fs::exists(dir, ec)) return std::vector<std::string>{};
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = StepOfName(it->path().filename().string());
    if (step >= 0 && it->is_regular_file(ec)) found.emplace_back(step, it->path().string());
  }
  if (ec) return absl::InternalError(absl::StrCat("listing checkpoints in ", dir, ": ", ec.message()));
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> all = ListCheckpoints(dir);
  if (!all.ok()) return all.status();
  if (all->empty()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  return all->back();
}

absl::StatusOr<std::string> NewestReadableCheckpoint(const std::string& dir, CheckpointMeta* meta) {
  absl::StatusOr<std::vector<std::string>> all = ListCheckpoints(dir);
  if (!all.ok()) return all.status();
  for (auto it = all->rbegin(); it != all->rend(); ++it) {
    absl::StatusOr<CheckpointMeta> m = ReadCheckpointMeta(*it);
    if (!m.ok()) continue;
    *meta = *std::move(m);
    return *it;
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint with a readable header in ", dir));
}

absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                            const std::vector<CheckpointUnit>& units, int keep) {
  std::error_code ec;
  // The folder is created below one inside the write roots, never through a symlink, and
  // the file is created and renamed through its checked descriptor, so a folder swapped
  // for a symlink after the daemon's path check cannot redirect the write.
  absl::StatusOr<UniqueFd> dir_fd = CreateDirForWrite(dir);
  if (!dir_fd.ok()) {
    return absl::Status(dir_fd.status().code(),
                        absl::StrCat("creating checkpoint directory: ", dir_fd.status().message()));
  }
  const std::string path = CheckpointPath(dir, meta.step);
  const std::string tmp = path + ".tmp";
  const std::string name = fs::path(path).filename().string(), tmp_name = name + ".tmp";
  bool created = false;
  absl::Status s = [&]() -> absl::Status {
    absl::StatusOr<UniqueFd> file = CreateFileAt(dir_fd->get(), tmp_name, tmp);
    if (!file.ok()) {
      return absl::Status(file.status().code(), absl::StrCat("creating checkpoint: ", file.status().message()));
    }
    created = true;
    Fd f{file->Release()};
    Checksum sum;
    const std::string header = HeaderJson(meta, units);
    const uint32_t version[2] = {kCheckpointVersion, 0};
    const uint64_t header_bytes = header.size();
    absl::Status w = WriteAll(f.fd, tmp, kMagic, 8, &sum);
    if (w.ok()) w = WriteAll(f.fd, tmp, version, 8, &sum);
    if (w.ok()) w = WriteAll(f.fd, tmp, &header_bytes, 8, &sum);
    if (w.ok()) w = WriteAll(f.fd, tmp, header.data(), header.size(), &sum);
    for (const CheckpointUnit& u : units) {
      if (w.ok()) w = WriteAll(f.fd, tmp, u.master, static_cast<size_t>(u.numel) * sizeof(float), &sum);
      for (const MomentBuffer& b : MomentBuffers(u.moments, u.numel)) {
        if (w.ok()) w = WriteAll(f.fd, tmp, b.data, b.bytes, &sum);
      }
    }
    const uint64_t checksum = sum.Final();
    if (w.ok()) w = WriteAll(f.fd, tmp, &checksum, 8, nullptr);
    if (w.ok()) w = WriteAll(f.fd, tmp, kEndMagic, 8, nullptr);
    if (!w.ok()) return w;
    if (::fsync(f.fd) != 0) return absl::InternalError(absl::StrCat("fsync of checkpoint ", tmp, ": ", Errno(errno)));
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) return absl::InternalError(absl::StrCat("closing checkpoint ", tmp, ": ", Errno(errno)));
    if (::renameat(dir_fd->get(), tmp_name.c_str(), dir_fd->get(), name.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("renaming ", tmp, " to ", path, ": ", Errno(errno)));
    }
    if (::fsync(dir_fd->get()) != 0) {
      return absl::InternalError(absl::StrCat("fsync of directory ", dir, ": ", Errno(errno)));
    }
    return absl::OkStatus();
  }();
  if (!s.ok()) {
    if (created) ::unlinkat(dir_fd->get(), tmp_name.c_str(), 0);
    return s;
  }
  PruneRun(dir_fd->get(), dir, meta.run_id, path, keep);
  // Leftovers of writes that were killed, removed through the checked folder too.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (absl::EndsWith(name, ".tmp") && StepOfName(name.substr(0, name.size() - 4)) >= 0) {
      ::unlinkat(dir_fd->get(), name.c_str(), 0);
    }
  }
  return path;
}

absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& path) {
  absl::StatusOr<UniqueFd> f = OpenCheckpoint(path);
  if (!f.ok()) return f.status();
  absl::StatusOr<Header> h = ReadHeader(f->get(), path, nullptr);
  if (!h.ok()) return h.status();
  return h->meta;
}

absl::StatusOr<CheckpointMeta> ReadCheckpoint(const std::string& path,
                                              const std::vector<CheckpointUnit>& units,
                                              const StopToken* stop) {
  absl::StatusOr<UniqueFd> opened = OpenCheckpoint(path);
  if (!opened.ok()) return opened.status();
  const int fd = opened->get();
  Checksum sum;
  absl::StatusOr<Header> h = ReadHeader(fd, path, &sum);
  if (!h.ok()) return h.status();
  if (h->units.size() != units.size()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " has ", h->units.size(),
                                                      " units; the model has ", units.size()));
  }
  const MomentDtype wanted = units.empty() ? MomentDtype::kFp32 : units[0].moments.dtype;
  if (h->moments != wanted) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " holds ", NameOf(h->moments), " AdamW moments; this job's optimizer.state_dtype is ",
        NameOf(wanted), " (resume with state_dtype ", NameOf(h->moments), ")"));
  }
  uint64_t expected = h->bytes + 16;
  for (size_t i = 0; i < units.size(); ++i) {
    if (!SameUnitName(h->units[i].first, units[i].name) || h->units[i].second != units[i].numel) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, ": unit ", i, " is ", h->units[i].first, " with ", h->units[i].second,
          " elements; the model's is ", units[i].name, " with ", units[i].numel));
    }
    expected += static_cast<uint64_t>(units[i].numel) * sizeof(float);
    for (const MomentBuffer& b : MomentBuffers(units[i].moments, units[i].numel)) expected += b.bytes;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != expected) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " has ", st.st_size, " bytes; its header says ",
                                            expected, " (truncated or corrupt)"));
  }
  // In slices, so that a cancel or shutdown is seen within a second even when the
  // state is tens of GB (12 bytes a parameter).
  for (const CheckpointUnit& u : units) {
    std::vector<MomentBuffer> bufs = {{u.master, static_cast<size_t>(u.numel) * sizeof(float)}};
    for (const MomentBuffer& b : MomentBuffers(u.moments, u.numel)) bufs.push_back(b);
    for (const MomentBuffer& buf : bufs) {
      char* bytes = static_cast<char*>(buf.data);
      const size_t n = buf.bytes;
      for (size_t done = 0; done < n; done += kStopCheckBytes) {
        if (absl::Status s = CheckStop(stop, absl::StrCat("reading checkpoint ", path)); !s.ok()) return s;
        if (absl::Status s = ReadAll(fd, path, bytes + done, std::min(kStopCheckBytes, n - done), &sum); !s.ok()) return s;
      }
    }
  }
  uint64_t checksum = 0;
  char end[8];
  if (absl::Status s = ReadAll(fd, path, &checksum, 8, nullptr); !s.ok()) return s;
  if (absl::Status s = ReadAll(fd, path, end, 8, nullptr); !s.ok()) return s;
  if (checksum != sum.Final() || std::memcmp(end, kEndMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": checksum mismatch (corrupt file)"));
  }
  return h->meta;
}

}  // namespace slidedp
