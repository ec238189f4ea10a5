// Checkpoints: the file format round-trips and detects damage; a process killed with
// SIGKILL while writing, or a write that hits a full disk (RLIMIT_FSIZE), leaves the
// previous checkpoint readable. (A trainer resumed from one, and non-finite steps:
// tests/runtime/engine/checkpoint_resume_test.cc.)
#include "runtime/state/checkpoint.h"
#include "runtime/io/stop_token.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>


namespace slidedp {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end of the scope.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_((fs::temp_directory_path() / ("slidedp_ckpt_" + name + "_" + std::to_string(::getpid()))).string()) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  operator const std::string&() const { return path_; }
  std::string operator+(const char* tail) const { return path_ + tail; }

 private:
  std::string path_;
};

// Buffers of a two-unit "model" filled with a pattern that depends on `salt`.
struct Buffers {
  std::vector<std::vector<float>> master, m, v;
  Buffers(std::vector<int64_t> sizes, float salt) {
    for (int64_t n : sizes) {
      master.emplace_back(n), m.emplace_back(n), v.emplace_back(n);
      for (int64_t i = 0; i < n; ++i) {
        master.back()[i] = salt + 0.5f * i;
        m.back()[i] = salt - i;
        v.back()[i] = salt * 3 + i;
      }
    }
  }
  std::vector<CheckpointUnit> Units() {
    std::vector<CheckpointUnit> u;
    for (size_t i = 0; i < master.size(); ++i) {
      u.push_back({"unit" + std::to_string(i), static_cast<int64_t>(master[i].size()), master[i].data(),
                   Fp32Moments(m[i].data(), v[i].data())});
    }
    return u;
  }
};

CheckpointMeta Meta(int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  meta.adam_steps = step - 1;
  meta.tokens_seen = 1000 * step;
  meta.skipped_steps = 1;
  meta.seed = 0xfeedbeefcafe1234ULL;
  meta.data_cursor = "{\"cursor\":\"x\"}";
  meta.config_json = "{\"model\":\"tiny\"}";
  return meta;
}

TEST(Checkpoint, RoundTripsEveryFieldAndBuffer) {
  const TempDir dir("roundtrip");
  Buffers in({100, 7}, 1.25f);
  absl::StatusOr<std::string> path = WriteCheckpoint(dir, Meta(12), in.Units(), 3);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, CheckpointPath(dir, 12));
  Buffers out({100, 7}, 0.0f);
  absl::StatusOr<CheckpointMeta> meta = ReadCheckpoint(*path, out.Units());
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, 12);
  EXPECT_EQ(meta->adam_steps, 11);
  EXPECT_EQ(meta->tokens_seen, 12000);
  EXPECT_EQ(meta->skipped_steps, 1);
  EXPECT_EQ(meta->seed, 0xfeedbeefcafe1234ULL);
  EXPECT_EQ(meta->data_cursor, "{\"cursor\":\"x\"}");
  EXPECT_EQ(meta->config_json, "{\"model\":\"tiny\"}");
  EXPECT_EQ(out.master, in.master);
  EXPECT_EQ(out.m, in.m);
  EXPECT_EQ(out.v, in.v);
}

// Issue 22: compact moments are stored as they are (codes and block scales), say their
// dtype, come back bit for bit, and a reader of another moment dtype is refused with
// both named.
TEST(Checkpoint, CompactMomentsRoundTripAndAnotherDtypeIsRefused) {
  const TempDir dir("compact");
  const int64_t n = 3 * kMomentBlock + 5;
  std::vector<float> master(n, 0.5f), master_out(n);
  std::vector<int8_t> m(n), m_out(n);
  std::vector<uint8_t> v(n), v_out(n);
  std::vector<float> ms(4), vs(4), ms_out(4), vs_out(4);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = static_cast<int8_t>(i % 255 - 127);
    v[i] = static_cast<uint8_t>(i * 7);
    master[i] = 0.25f * i;
  }
  for (int b = 0; b < 4; ++b) ms[b] = 1.5f + b, vs[b] = 0.125f * b;
  auto view = [](int8_t* qm, uint8_t* qv, float* sm, float* sv) {
    MomentView mv;
    mv.dtype = MomentDtype::kInt8;
    mv.m = qm, mv.v = qv, mv.m_scale = sm, mv.v_scale = sv;
    return mv;
  };
  const std::vector<CheckpointUnit> in = {{"unit0", n, master.data(), view(m.data(), v.data(), ms.data(), vs.data())}};
  absl::StatusOr<std::string> path = WriteCheckpoint(dir, Meta(4), in, 3);
  ASSERT_TRUE(path.ok()) << path.status();
  const std::vector<CheckpointUnit> out = {
      {"unit0", n, master_out.data(), view(m_out.data(), v_out.data(), ms_out.data(), vs_out.data())}};
  ASSERT_TRUE(ReadCheckpoint(*path, out).ok());
  EXPECT_EQ(master_out, master);
  EXPECT_EQ(m_out, m);
  EXPECT_EQ(v_out, v);
  EXPECT_EQ(ms_out, ms);
  EXPECT_EQ(vs_out, vs);

  Buffers fp32({n}, 0.0f);
  absl::StatusOr<CheckpointMeta> refused = ReadCheckpoint(*path, fp32.Units());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("int8"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("fp32"), std::string::npos) << refused.status();
}

// Reading back the state observes a stop: a restore of tens of GB must not outlast a
// cancel or a shutdown (issue 18, case 5).
TEST(Checkpoint, ReadingStopsWhenAsked) {
  const TempDir dir("read_stop");
  Buffers in({100, 7}, 1.25f);
  const std::string path = *WriteCheckpoint(dir, Meta(3), in.Units(), 3);
  Buffers out({100, 7}, 0.0f);
  StopToken stop;
  ASSERT_TRUE(ReadCheckpoint(path, out.Units(), &stop).ok());
  stop.RequestStop();
  absl::StatusOr<CheckpointMeta> r = ReadCheckpoint(path, out.Units(), &stop);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
}

TEST(Checkpoint, KeepsTheNewestKAndFindsTheLatest) {
  const TempDir dir("keep");
  Buffers b({10}, 1.0f);
  for (int64_t step : {5, 10, 15, 20}) ASSERT_TRUE(WriteCheckpoint(dir, Meta(step), b.Units(), 2).ok());
  absl::StatusOr<std::vector<std::string>> all = ListCheckpoints(dir);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, (std::vector<std::string>{CheckpointPath(dir, 15), CheckpointPath(dir, 20)}));
  EXPECT_EQ(*LatestCheckpoint(dir), CheckpointPath(dir, 20));
  EXPECT_EQ(LatestCheckpoint(TempDir("empty")).status().code(), absl::StatusCode::kNotFound);
}

TEST(Checkpoint, DetectsCorruptionTruncationAndAnotherModel) {
  const TempDir dir("corrupt");
  Buffers b({64}, 2.0f);
  const std::string path = *WriteCheckpoint(dir, Meta(1), b.Units(), 3);
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size) - 100);
    f.put('\x7f');
  }
  absl::StatusOr<CheckpointMeta> r = ReadCheckpoint(path, b.Units());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find(path), std::string::npos);

  fs::resize_file(path, size - 9);
  r = ReadCheckpoint(path, b.Units());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();

  const std::string good = *WriteCheckpoint(dir, Meta(2), b.Units(), 3);
  Buffers other({65}, 0.0f);
  r = ReadCheckpoint(good, other.Units());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();

  std::ofstream(dir + "/ckpt-000000003.slidedp") << "not a checkpoint";
  EXPECT_EQ(ReadCheckpointMeta(dir + "/ckpt-000000003.slidedp").status().code(), absl::StatusCode::kDataLoss);
}

// Each checkpoint records the run that wrote it; pruning deletes only the writer's own
// (issue 18, case 7: a job's checkpoint was pruned at once because another job's in the
// same directory were newer), never the one just written, and never a file whose header
// does not read. A checkpoint from before run ids reads with none.
TEST(Checkpoint, RecordsItsRunAndPrunesOnlyThatRunsCheckpoints) {
  const TempDir dir("runs");
  Buffers b({10}, 1.0f);
  const auto write = [&](int64_t step, const std::string& run, int keep) {
    CheckpointMeta meta = Meta(step);
    meta.run_id = run;
    absl::StatusOr<std::string> path = WriteCheckpoint(dir, meta, b.Units(), keep);
    EXPECT_TRUE(path.ok()) << path.status();
  };
  for (int64_t step : {10, 20, 30, 40}) write(step, "job-a", 2);
  write(5, "job-b", 2);
  write(6, "job-b", 2);
  write(7, "job-b", 2);
  EXPECT_EQ(*ListCheckpoints(dir), (std::vector<std::string>{CheckpointPath(dir, 6), CheckpointPath(dir, 7),
                                                             CheckpointPath(dir, 30), CheckpointPath(dir, 40)}));
  EXPECT_EQ(ReadCheckpointMeta(CheckpointPath(dir, 40))->run_id, "job-a");
  EXPECT_EQ(ReadCheckpointMeta(CheckpointPath(dir, 7))->run_id, "job-b");
  Buffers back({10}, 0.0f);
  EXPECT_EQ(ReadCheckpoint(CheckpointPath(dir, 7), back.Units())->run_id, "job-b");
  // With keep 1, the one just written stays even when a newer one of the run exists
  // (e.g. a corrupt one that a resume passed over), and an unreadable file is left.
  std::ofstream(CheckpointPath(dir, 3)) << "not a checkpoint";
  write(35, "job-a", 1);
  EXPECT_EQ(*ListCheckpoints(dir), (std::vector<std::string>{CheckpointPath(dir, 3), CheckpointPath(dir, 6),
                                                             CheckpointPath(dir, 7), CheckpointPath(dir, 35),
                                                             CheckpointPath(dir, 40)}));
  // Written before run ids: none.
  absl::StatusOr<CheckpointMeta> old =
      ReadCheckpointMeta(std::string(SLIDEDP_SOURCE_DIR) + "/tests/fuzz/corpus/checkpoint/valid.slidedp");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->run_id, "");
  EXPECT_EQ(old->step, 3);
}

// A child process writes a large checkpoint and is killed with SIGKILL in the middle;
// the previous checkpoint stays the latest and reads back intact, and the next write
// cleans up the partial file.
TEST(Checkpoint, KillDuringWriteKeepsThePreviousCheckpoint) {
  const TempDir dir("kill");
  Buffers small({1000}, 3.0f);
  const std::string previous = *WriteCheckpoint(dir, Meta(1), small.Units(), 3);
  const int64_t big = int64_t{48} << 20;  // 3 x 192 MiB: the write takes a while
  const std::string tmp = CheckpointPath(dir, 2) + ".tmp";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::vector<float> buf(big, 1.0f);
    std::vector<CheckpointUnit> units = {{"unit0", big, buf.data(), Fp32Moments(buf.data(), buf.data())}};
    for (;;) (void)WriteCheckpoint(dir, Meta(2), units, 3);
  }
  // Kill it while the temporary file is partly written.
  bool seen = false;
  for (int i = 0; i < 3000 && !seen; ++i) {
    std::error_code ec;
    seen = fs::exists(tmp, ec) && fs::file_size(tmp, ec) > (uintmax_t{1} << 20);
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(seen) << "the child never started writing " << tmp;
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(*LatestCheckpoint(dir), previous) << "a killed write must not become the latest";
  Buffers back({1000}, 0.0f);
  ASSERT_TRUE(ReadCheckpoint(previous, back.Units()).ok());
  EXPECT_EQ(back.master, small.master);
  // The next successful write removes the leftover.
  ASSERT_TRUE(WriteCheckpoint(dir, Meta(3), small.Units(), 3).ok());
  EXPECT_FALSE(fs::exists(tmp));
}

// A write that runs into a full disk (here: a file size limit with SIGXFSZ ignored, so
// write() fails with EFBIG as on ENOSPC) fails with a clear error naming the file, and
// leaves the previous checkpoint as it was.
TEST(Checkpoint, FullDiskFailsClearlyAndKeepsThePreviousCheckpoint) {
  const TempDir dir("full");
  Buffers small({1000}, 4.0f);
  const std::string previous = *WriteCheckpoint(dir, Meta(1), small.Units(), 1);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    Buffers big({1 << 20}, 5.0f);  // 12 MiB of state > 1 MiB limit
    absl::StatusOr<std::string> r = WriteCheckpoint(dir, Meta(2), big.Units(), 1);
    const std::string msg = r.ok() ? "OK" : std::string(r.status().ToString());
    (void)!::write(pipefd[1], msg.data(), msg.size());
    ::_exit(r.ok() ? 1 : 0);
  }
  ::close(pipefd[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) msg.append(buf, n);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << msg;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the write should have failed: " << msg;
  EXPECT_NE(msg.find("RESOURCE_EXHAUSTED"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_NE(msg.find(CheckpointPath(dir, 2)), std::string::npos) << msg;
  EXPECT_NE(msg.find("previous checkpoint is kept"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(CheckpointPath(dir, 2) + ".tmp"));
  EXPECT_EQ(*LatestCheckpoint(dir), previous);
  Buffers back({1000}, 0.0f);
  ASSERT_TRUE(ReadCheckpoint(previous, back.Units()).ok());
  EXPECT_EQ(back.master, small.master);
}

}  // namespace
}  // namespace slidedp
