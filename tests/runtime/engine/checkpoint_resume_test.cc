// A trainer resumed from a checkpoint ends bit-identical to an uninterrupted run (with
// and without clipping, compact moments, resident units, and from resident units to
// none); a checkpoint of another moment dtype, job or run is refused, a corrupt newest
// one passed over; non-finite steps are skipped, counted, and fail the job after
// max_bad_steps in a row. (The file format itself: tests/runtime/state/checkpoint_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/engine/trainer.h"
#include "runtime/state/checkpoint.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

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

  const std::string ckpt = testing::ProcessTempDir("slidedp_resume", name);
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
  const std::string ckpt = testing::ProcessTempDir("slidedp_resume", "resident_to_none");
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
  const std::string ckpt = testing::ProcessTempDir("slidedp_resume", "other_moments");
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
  const std::string ckpt = testing::ProcessTempDir("slidedp_resume", "other"),
                    empty = testing::ProcessTempDir("slidedp_resume", "nothing_here");
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
  const std::string ckpt = testing::ProcessTempDir("slidedp_resume", "other_run");
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
  const std::string ckpt = testing::ProcessTempDir("slidedp_resume", "fallback");
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
  c.optimizer.schedule = LrScheduleKind::kConstant;
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
