// Checkpoints: the file format round-trips and detects damage; a process killed with
// SIGKILL while writing, or a write that hits a full disk (RLIMIT_FSIZE), leaves the
// previous checkpoint readable; a trainer resumed from a checkpoint ends bit-identical
// to an uninterrupted run; non-finite steps are skipped, counted, and fail the job
// after max_bad_steps in a row.
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

#include "runtime/engine/trainer.h"
#include "tests/test_support.h"

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

TrainConfig Tiny(int steps) {
  TrainConfig c = testing::TinyTrainConfig(steps);
  c.optimizer.warmup_steps = 2;
  c.optimizer.weight_decay = 0.01;
  c.policy.update_threads = 1;
  return c;
}

// Runs `steps` steps; returns the losses.
std::vector<double> Run(Trainer& t, int steps) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepStats> s = t.Step();
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) break;
    losses.push_back(s->loss);
  }
  return losses;
}

void ExpectResumeIsBitExact(TrainConfig c, const std::string& name) {
  auto whole = Trainer::Create(c);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<double> all = Run(**whole, 8);
  const std::string digest = (*whole)->WeightsDigest();

  const TempDir ckpt(name);
  TrainConfig first = c;
  first.checkpoint_dir = ckpt;
  first.checkpoint_interval = 3;
  auto a = Trainer::Create(first);
  ASSERT_TRUE(a.ok()) << a.status();
  Run(**a, 5);  // checkpoint at step 3; steps 4, 5 are lost with the process
  a->reset();

  TrainConfig second = first;
  second.resume_from = first.checkpoint_dir;
  auto b = Trainer::Create(second);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->completed_steps(), 3);
  EXPECT_GT((*b)->tokens_seen(), 0);
  const std::vector<double> rest = Run(**b, 5);
  ASSERT_EQ(rest.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(rest[i], all[3 + i]) << "step " << 4 + i;
  EXPECT_EQ((*b)->WeightsDigest(), digest);
}

TEST(CheckpointResume, IsBitExactWithClipping) { ExpectResumeIsBitExact(Tiny(8), "resume_clip"); }

TEST(CheckpointResume, IsBitExactWithoutClipping) {
  TrainConfig c = Tiny(8);
  c.optimizer.max_grad_norm = 0;  // the speculative per-unit update path
  ExpectResumeIsBitExact(c, "resume_noclip");
}

// Issue 22: with bf16 and with 8-bit moments, resume is bit-exact too.
TEST(CheckpointResume, IsBitExactWithCompactMoments) {
  for (const char* dtype : {"bf16", "int8"}) {
    SCOPED_TRACE(dtype);
    TrainConfig c = Tiny(8);
    c.optimizer.state_dtype = *EnumFromName<MomentDtype>(dtype);
    ExpectResumeIsBitExact(c, std::string("resume_") + dtype);
    c.optimizer.max_grad_norm = 0;
    ExpectResumeIsBitExact(c, std::string("resume_noclip_") + dtype);
  }
}

// Issue 21: with units resident on the (CPU) device, two workers, clipping on and off,
// the checkpoint brings their state back to the host and the resume sends it out again:
// bit-exact; and a checkpoint of a run with resident units resumes into a run without.
TEST(CheckpointResume, IsBitExactWithResidentUnits) {
  TrainConfig c = Tiny(8);
  c.policy.resident_units = 3;
  ExpectResumeIsBitExact(c, "resume_resident");
  c.optimizer.max_grad_norm = 0;
  ExpectResumeIsBitExact(c, "resume_resident_noclip");
  c.optimizer.max_grad_norm = 1.0;
  c.workers = 1;
  c.grad_accum = 2;
  ExpectResumeIsBitExact(c, "resume_resident_w1");
}

TEST(CheckpointResume, IsBitExactFromResidentUnitsToNone) {
  TrainConfig c = Tiny(6);
  c.workers = 1;
  c.grad_accum = 2;
  c.policy.resident_units = 0;
  auto whole = Trainer::Create(c);
  ASSERT_TRUE(whole.ok()) << whole.status();
  slidedp::Run(**whole, 6);
  const TempDir ckpt("resident_to_none");
  TrainConfig first = c;
  first.policy.resident_units = 2;
  first.checkpoint_dir = ckpt;
  first.checkpoint_interval = 3;
  auto a = Trainer::Create(first);
  ASSERT_TRUE(a.ok()) << a.status();
  slidedp::Run(**a, 3);
  a->reset();
  TrainConfig second = c;
  second.checkpoint_dir = ckpt;
  second.resume_from = ckpt;
  auto b = Trainer::Create(second);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*b)->completed_steps(), 3);
  slidedp::Run(**b, 3);
  EXPECT_EQ((*b)->WeightsDigest(), (*whole)->WeightsDigest());
}

TEST(CheckpointResume, RefusesACheckpointOfAnotherMomentDtype) {
  TrainConfig c = Tiny(4);
  c.optimizer.state_dtype = MomentDtype::kInt8;
  const TempDir ckpt("other_moments");
  c.checkpoint_dir = ckpt;
  auto a = Trainer::Create(c);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Step().ok());
  ASSERT_TRUE((*a)->SaveCheckpoint().ok());
  TrainConfig other = c;
  other.optimizer.state_dtype = MomentDtype::kFp32;
  other.resume_from = c.checkpoint_dir;
  auto b = Trainer::Create(other);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("state_dtype"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("int8"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("fp32"), std::string::npos) << b.status();
}

TEST(CheckpointResume, RefusesACheckpointOfAnotherJob) {
  TrainConfig c = Tiny(4);
  const TempDir ckpt("other"), empty("nothing_here");
  c.checkpoint_dir = ckpt;
  auto a = Trainer::Create(c);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->Step().ok());
  ASSERT_TRUE((*a)->SaveCheckpoint().ok());
  TrainConfig other = c;
  other.optimizer.lr = 1e-2;
  other.resume_from = c.checkpoint_dir;
  auto b = Trainer::Create(other);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("optimizer.lr"), std::string::npos) << b.status();
  other = c;
  other.resume_from = empty;
  EXPECT_EQ(Trainer::Create(other).status().code(), absl::StatusCode::kNotFound);
}

// Issue 18, case 7: a trainer of one run refuses a checkpoint another run wrote, naming
// both; without a run id (slidedp-train) any checkpoint of the same job is taken.
TEST(CheckpointResume, RefusesACheckpointOfAnotherRun) {
  TrainConfig c = Tiny(4);
  const TempDir ckpt("other_run");
  c.checkpoint_dir = ckpt;
  c.run_id = "job-000000000aaa";
  auto a = Trainer::Create(c);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Step().ok());
  absl::StatusOr<std::string> written = (*a)->SaveCheckpoint();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(ReadCheckpointMeta(*written)->run_id, "job-000000000aaa");
  for (const std::string& from : {*written, std::string(ckpt)}) {
    TrainConfig other = c;
    other.run_id = "job-000000000bbb";
    other.resume_from = from;
    auto b = Trainer::Create(other);
    ASSERT_FALSE(b.ok()) << from;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
    EXPECT_NE(b.status().message().find("job-000000000aaa"), std::string::npos) << b.status();
    EXPECT_NE(b.status().message().find("job-000000000bbb"), std::string::npos) << b.status();
    EXPECT_NE(b.status().message().find(*written), std::string::npos) << b.status();
  }
  TrainConfig same = c;
  same.resume_from = ckpt;
  auto resumed = Trainer::Create(same);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->completed_steps(), 1);
  TrainConfig no_run = c;
  no_run.run_id.clear();
  no_run.resume_from = *written;
  EXPECT_TRUE(Trainer::Create(no_run).ok()) << "slidedp-train (no run id) keeps today's behaviour";
}

// Issue 18, case 8: the newest checkpoint of a directory fails verification (bytes of
// its payload flipped, or the file truncated): the resume passes over it to the newest
// one that verifies, says which one it passed over and why, and continues bit-exactly
// as a resume from that one directly does. When none verifies, it fails naming them.
TEST(CheckpointResume, PassesOverACorruptNewestCheckpoint) {
  TrainConfig c = Tiny(8);
  const TempDir ckpt("fallback");
  c.checkpoint_dir = ckpt;
  c.checkpoint_interval = 2;
  c.run_id = "run-1";
  {
    auto a = Trainer::Create(c);
    ASSERT_TRUE(a.ok()) << a.status();
    slidedp::Run(**a, 7);  // checkpoints at 2, 4, 6
  }
  ASSERT_EQ(ListCheckpoints(ckpt)->size(), 3u);
  const std::string at4 = CheckpointPath(ckpt, 4), at6 = CheckpointPath(ckpt, 6);
  // What a resume from step 4's checkpoint itself does.
  TrainConfig direct = c;
  direct.checkpoint_dir.clear();
  direct.checkpoint_interval = 0;
  direct.resume_from = at4;
  auto d = Trainer::Create(direct);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->resumed().path, at4);
  const std::vector<double> expected = slidedp::Run(**d, 4);
  const std::string digest = (*d)->WeightsDigest();

  const std::string pristine = ckpt + "/pristine";
  fs::copy_file(at6, pristine);
  const auto size = fs::file_size(at6);
  for (const char* damage : {"flipped", "truncated"}) {
    fs::copy_file(pristine, at6, fs::copy_options::overwrite_existing);
    if (std::string(damage) == "flipped") {
      std::fstream f(at6, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(size / 2));
      f.write("Þ­¾ï", 4);
    } else {
      fs::resize_file(at6, size - 1000);
    }
    TrainConfig again = c;
    again.checkpoint_dir.clear();
    again.checkpoint_interval = 0;
    again.resume_from = ckpt;
    auto t = Trainer::Create(again);
    ASSERT_TRUE(t.ok()) << damage << ": " << t.status();
    EXPECT_EQ((*t)->completed_steps(), 4) << damage;
    const ResumeReport r = (*t)->resumed();
    EXPECT_EQ(r.path, at4) << damage;
    EXPECT_EQ(r.step, 4) << damage;
    ASSERT_EQ(r.passed_over.size(), 1u) << damage;
    EXPECT_NE(r.passed_over[0].find(at6), std::string::npos) << r.passed_over[0];
    EXPECT_NE(r.passed_over[0].find(std::string(damage) == "flipped" ? "checksum mismatch" : "truncated"),
              std::string::npos) << r.passed_over[0];
    EXPECT_EQ(slidedp::Run(**t, 4), expected) << damage;
    EXPECT_EQ((*t)->WeightsDigest(), digest) << damage << ": bit-exact with a resume from step 4 directly";
  }

  // None verifies: DATA_LOSS naming each, not a silent start from step 0.
  for (int64_t step : {2, 4}) {
    const std::string path = CheckpointPath(ckpt, step);
    fs::resize_file(path, fs::file_size(path) - 8);
  }
  TrainConfig again = c;
  again.resume_from = ckpt;
  auto t = Trainer::Create(again);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_NE(t.status().message().find("none of the 3 checkpoints in " + std::string(ckpt) + " verifies"),
            std::string::npos) << t.status();
  for (int64_t step : {2, 4, 6}) {
    EXPECT_NE(t.status().message().find(CheckpointPath(ckpt, step)), std::string::npos) << t.status();
  }
}

// An absurd learning rate makes the weights overflow: the steps after it are skipped
// (no update), counted with the unit named, and max_bad_steps of them in a row fail.
TEST(NonFinite, SkipsCountsAndFailsAfterMaxBadSteps) {
  TrainConfig c = Tiny(30);
  c.optimizer.lr = 1e38;
  c.optimizer.warmup_steps = 0;
  c.optimizer.schedule = "constant";
  c.max_bad_steps = 3;
  auto t = Trainer::Create(c);
  ASSERT_TRUE(t.ok()) << t.status();
  int skipped = 0;
  absl::Status failure;
  for (int i = 0; i < 30; ++i) {
    absl::StatusOr<StepStats> s = (*t)->Step();
    if (!s.ok()) {
      failure = s.status();
      break;
    }
    if (s->skipped) {
      ++skipped;
      EXPECT_EQ(s->bad_steps_in_row, skipped);
    }
  }
  ASSERT_FALSE(failure.ok()) << "the overflowing job never failed";
  EXPECT_EQ(skipped, 2) << "two skipped steps are reported before the third fails";
  EXPECT_EQ(failure.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(failure.message().find("max_bad_steps 3"), std::string::npos) << failure;
  EXPECT_NE(failure.message().find(" in a row"), std::string::npos) << failure;
  EXPECT_NE(failure.message().find("steps "), std::string::npos) << failure;
  EXPECT_NE(failure.message().find("unit "), std::string::npos) << failure;
}

}  // namespace
}  // namespace slidedp
