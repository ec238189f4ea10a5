// Stopping a job's long loops (issue 18, case 5): `eval_batches: 4611686018427387904`
// ran an evaluation forever that neither cancel nor SIGTERM could end. Such counts are
// bounded now, and every long loop observes the job's StopToken: the evaluation, the
// tokenization of a text file in Trainer::Create, the calibration, model loading, and
// the step's units, each returning CANCELLED within about a second of RequestStop().
#include "runtime/io/stop_token.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <system_error>
#include <vector>
#include <thread>

#include "absl/strings/match.h"
#include "tests/test_support.h"
#include "runtime/data/corpus_tokenizer.h"
#include "runtime/data/dataset.h"
#include "runtime/data/document_encoder.h"
#include "runtime/data/text_records.h"
#include "runtime/data/token_cache.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/engine/calibration.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/model_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/state/host_state.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A fresh directory for this process, removed when the tests end.
std::string TempDir(const std::string& name) { return testing::ProcessTempDir("slidedp_stop", name); }

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs `work` on a thread, asks `stop` to stop after `delay` seconds, and returns what
// `work` returned and how long after the request it took. A loop that does not stop
// within `limit` seconds fails the test process outright (it would hang otherwise).
template <typename Work>
auto StopAfter(StopToken& stop, double delay, Work work, double* seconds_after_stop, double limit = 60) {
  auto result = std::async(std::launch::async, std::move(work));
  std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  const Clock::time_point requested = Clock::now();
  stop.RequestStop();
  if (result.wait_for(std::chrono::duration<double>(limit)) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: still running %.0f s after RequestStop()\n", limit);
    std::fflush(stderr);
    std::_Exit(1);
  }
  auto value = result.get();
  *seconds_after_stop = Since(requested);
  return value;
}

// A uint16 token file of `n` tokens below 512 (the tiny preset's vocabulary).
std::string TokenFile(const std::string& dir, int n) {
  const std::string path = dir + "/tokens.bin";
  std::ofstream f(path, std::ios::binary);
  for (int i = 0; i < n; ++i) {
    const uint16_t t = static_cast<uint16_t>((i * 7 + 3) % 509);
    f.write(reinterpret_cast<const char*>(&t), 2);
  }
  return path;
}

TrainConfig TinyOnTokens(const std::string& dir) {
  TrainConfig c;
  c.model = "tiny";
  c.data.format = DataFormat::kTokens;
  c.data.path = TokenFile(dir, 20000);
  c.data.eval_path = c.data.path;
  c.seq_len = 32;
  c.micro_batch_size = 2;
  c.steps = 1;
  return c;
}

TEST(StopLimits, CountsAreBounded) {
  const std::string dir = TempDir("limits");
  TrainConfig c = TinyOnTokens(dir);
  c.eval_batches = int64_t{4611686018427387904};  // the issue's
  absl::Status s = ValidateTrainConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "eval_batches")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "2^40")) << s;
  // 2^40 tokens an evaluation at most: 2 x 32 tokens a batch allow 2^34 batches.
  c.eval_batches = int64_t{1} << 34;
  EXPECT_TRUE(ValidateTrainConfig(c).ok());
  c.eval_batches = (int64_t{1} << 34) + 1;
  EXPECT_FALSE(ValidateTrainConfig(c).ok());
  c.eval_batches = 1;
  const struct {
    const char* field;
    int64_t TrainConfig::*member;
  } counts[] = {{"steps", &TrainConfig::steps},
                {"checkpoint_interval", &TrainConfig::checkpoint_interval},
                {"eval_interval", &TrainConfig::eval_interval},
                {"log_every", &TrainConfig::log_every}};
  for (const auto& f : counts) {
    TrainConfig t = c;
    t.checkpoint_dir = dir;
    t.*f.member = int64_t{1} << 40;
    EXPECT_TRUE(ValidateTrainConfig(t).ok()) << f.field;
    t.*f.member = (int64_t{1} << 40) + 1;
    absl::Status e = ValidateTrainConfig(t);
    EXPECT_TRUE(absl::StrContains(e.message(), f.field)) << e;
  }
  TrainConfig t = c;
  t.optimizer.warmup_steps = int64_t{1} << 62;
  EXPECT_TRUE(absl::StrContains(ValidateTrainConfig(t).message(), "optimizer.warmup_steps"));
  t = c;
  t.policy.loss_chunk_tokens = int64_t{1} << 62;
  EXPECT_TRUE(absl::StrContains(ValidateTrainConfig(t).message(), "policy.loss_chunk_tokens"));
  t = c;
  t.policy.chunk_elems = int64_t{1} << 62;
  EXPECT_TRUE(absl::StrContains(ValidateTrainConfig(t).message(), "policy.chunk_elems"));
  t = c;
  t.policy.mlp_tile_tokens = int64_t{1} << 62;
  EXPECT_TRUE(absl::StrContains(ValidateTrainConfig(t).message(), "policy.mlp_tile_tokens"));
  // The same from a job file, with the line.
  absl::StatusOr<TrainConfig> parsed = ParseTrainConfig(
      "model: tiny\ndata:\n  format: tokens\n  path: x.bin\n  eval_path: x.bin\neval_batches: 4611686018427387904\n",
      "job.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "eval_batches")) << parsed.status();
}

// The issue's case: an evaluation of very many batches (within the bound: 2^30 of 64
// tokens) is stopped within a second or two, and the trainer stays at its step.
TEST(Stop, ALongEvaluationStopsPromptly) {
  const std::string dir = TempDir("eval");
  TrainConfig c = TinyOnTokens(dir);
  c.eval_batches = int64_t{1} << 30;
  auto stop = std::make_shared<StopToken>();
  TrainerInputs inputs;
  inputs.stop = stop;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, std::move(inputs));
  ASSERT_TRUE(t.ok()) << t.status();
  double after = 0;
  absl::StatusOr<StepStats> s = StopAfter(*stop, 1.0, [&] { return (*t)->Step(); }, &after);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kCancelled) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "evaluation after step 1")) << s.status();
  EXPECT_LT(after, 5.0) << "stopped " << after << " s after the request";
  EXPECT_EQ((*t)->completed_steps(), 1) << "the step itself completed; its evaluation was stopped";
  EXPECT_EQ((*t)->Step().status().code(), absl::StatusCode::kCancelled) << "a stopped trainer stays stopped";
}

// `n` JSON lines {"text": ...} of 4 KB: the same line of random words.
std::string TextLines(int n) {
  std::string line = R"({"text": ")";
  uint64_t x = 12345;
  while (line.size() < 4000) {
    for (int k = 0; k < 3 + static_cast<int>(x % 6); ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      line += static_cast<char>('a' + (x >> 33) % 26);
    }
    line += ' ';
  }
  line += "\"}\n";
  std::string text;
  text.reserve(line.size() * n);
  for (int i = 0; i < n; ++i) text += line;
  return text;
}

const std::string kTokenizer = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/tokenizer/qwen2";

// The tokenizer's threads stop at their next line: far sooner than the whole text
// takes (measured first), where without the stop each thread finished its chunks.
TEST(Stop, TokenizationStopsAtTheNextLine) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(kTokenizer + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<DocumentEncoder> encoder =
      DocumentEncoder::Create(**tokenizer, TextFormat::kText, ModelFamily::kQwen2);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const std::string text = TextLines(6000);  // 24 MB
  CorpusOptions options;
  options.progress = false;
  options.chunk_bytes = int64_t{16} << 20;  // few chunks: the stop must come from inside them
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(TokenizeCorpus(text, "t.jsonl", *encoder, options).ok());
  const double full = Since(t0);
  StopToken stop;
  options.stop = &stop;
  double after = 0;
  absl::StatusOr<TokenizedCorpus> stopped =
      StopAfter(stop, full / 4, [&] { return TokenizeCorpus(text, "t.jsonl", *encoder, options); }, &after);
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled) << stopped.status();
  EXPECT_TRUE(absl::StrContains(stopped.status().message(), "tokenizing t.jsonl")) << stopped.status();
  EXPECT_LT(after, full / 2) << "stopped " << after << " s after the request; the whole text takes " << full << " s";
}

// Tokenizing a text file of many MB in Trainer::Create stops as promptly: well before
// the tokenization would have ended (measured first on the same file), where without
// the stop it ran to its end.
TEST(Stop, TokenizationInCreateStopsPromptly) {
  const std::string dir = TempDir("tokenize");
  {
    std::ofstream f(dir + "/train.jsonl");
    f << TextLines(12000);  // 48 MB
  }
  TrainConfig c;
  c.model = "small";  // vocabulary 2048 > the fixture tokenizer's 1564 ids
  c.data.format = DataFormat::kText;
  c.data.path = dir + "/train.jsonl";
  c.data.tokenizer = kTokenizer;
  c.seq_len = 32;
  c.micro_batch_size = 2;
  c.steps = 1;
  // How long tokenizing the whole file takes here (its cache in a folder of its own).
  TrainConfig whole = c;
  whole.data.cache_dir = dir + "/cache-whole";
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(Trainer::Create(whole).ok());
  const double full = Since(t0);
  c.data.cache_dir = dir + "/cache";
  auto stop = std::make_shared<StopToken>();
  TrainerInputs inputs;
  inputs.stop = stop;
  double after = 0;
  absl::StatusOr<std::unique_ptr<Trainer>> t =
      StopAfter(*stop, full / 4, [&] { return Trainer::Create(c, std::move(inputs)); }, &after);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kCancelled) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "tokenizing")) << t.status();
  EXPECT_LT(after, full / 2) << "stopped " << after << " s after the request; tokenizing all takes " << full << " s";
  EXPECT_FALSE(fs::exists(dir + "/cache") && !fs::is_empty(dir + "/cache")) << "no cache of a partial tokenization";
}

// A dataset that asks the job to stop when the step takes its batch: the stop is seen
// inside the workers' units.
class StoppingDataset final : public Dataset {
 public:
  StoppingDataset(std::unique_ptr<Dataset> inner, StopToken* stop) : inner_(std::move(inner)), stop_(stop) {}
  absl::StatusOr<TokenBatch> Next(int64_t rows) override {
    if (++calls_ == stop_at_) stop_->RequestStop();
    return inner_->Next(rows);
  }
  std::string Cursor() const override { return inner_->Cursor(); }
  absl::Status Restore(const std::string& cursor) override { return inner_->Restore(cursor); }
  std::string Describe() const override { return inner_->Describe(); }
  int stop_at_ = 2;

 private:
  std::unique_ptr<Dataset> inner_;
  StopToken* stop_;
  int calls_ = 0;
};

TEST(Stop, AStepStoppedInItsUnitsLeavesTheStateOfTheLastStep) {
  const std::string dir = TempDir("step");
  TrainConfig c = TinyOnTokens(dir);
  c.data.eval_path.clear();
  c.steps = 3;
  c.workers = 2;
  c.checkpoint_dir = dir + "/ckpt";
  auto stop = std::make_shared<StopToken>();
  auto data = OpenDataset(c.data, c.seq_len, 512, c.seed);
  ASSERT_TRUE(data.ok()) << data.status();
  TrainerInputs inputs;
  inputs.stop = stop;
  inputs.train = std::make_unique<StoppingDataset>(*std::move(data), stop.get());
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, std::move(inputs));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Step().ok());
  const std::string digest = (*t)->WeightsDigest();
  absl::StatusOr<StepStats> s = (*t)->Step();  // the dataset stops it
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kCancelled) << s.status();
  EXPECT_EQ((*t)->completed_steps(), 1);
  EXPECT_EQ((*t)->WeightsDigest(), digest) << "nothing of the stopped step was applied (clipping holds its updates)";
  absl::StatusOr<std::string> saved = (*t)->SaveCheckpoint();
  EXPECT_TRUE(saved.ok()) << saved.status();
}

TEST(Stop, CalibrationAndModelLoadingStop) {
  StopToken stop;
  stop.RequestStop();
  TrainConfig c;
  c.model = "tiny";
  c.policy.auto_plan = true;
  absl::StatusOr<Calibration> cal = Calibrate(*PresetConfig("tiny"), c, &stop);
  EXPECT_EQ(cal.status().code(), absl::StatusCode::kCancelled) << cal.status();
  EXPECT_TRUE(absl::StrContains(cal.status().message(), "calibration")) << cal.status();

  // A model directory: the tiny preset's random weights, exported.
  const std::string dir = TempDir("load");
  c.policy.auto_plan = false;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->ExportHf(dir).ok());
  const ModelLayout layout = BuildLayout(*PresetConfig("tiny"));
  std::vector<float> sink(static_cast<size_t>(layout.total_numel));
  absl::Status loaded = LoadHfWeights(dir, layout, [&](int, int) { return sink.data(); }, &stop);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kCancelled) << loaded;
  // And through Create: a stop asked before is seen before anything long runs.
  TrainConfig from_dir = c;
  from_dir.model = dir;
  TrainerInputs inputs;
  inputs.stop = std::make_shared<StopToken>();
  std::const_pointer_cast<StopToken>(inputs.stop)->RequestStop();
  absl::StatusOr<std::unique_ptr<Trainer>> stopped = Trainer::Create(from_dir, std::move(inputs));
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled) << stopped.status();
}

}  // namespace
}  // namespace slidedp

namespace slidedp {
namespace {

// The text cache's key hashes the whole data file (GBs at a few GB/s): the hash checks
// the stop every 64 MiB, and gives the value of one pass so that existing caches stay
// valid.
TEST(Stop, HashingTheDataFileStopsAndKeepsItsValue) {
  std::string bytes((size_t{64} << 20) * 2 + 13, '\0');
  for (size_t i = 0; i < bytes.size(); i += 4093) bytes[i] = static_cast<char>(i * 31);
  for (size_t n : {size_t{0}, size_t{7}, size_t{8}, size_t{64} << 20, bytes.size()}) {
    const absl::string_view part(bytes.data(), n);
    absl::StatusOr<uint64_t> sliced = HashBytes(part, 5, nullptr);
    ASSERT_TRUE(sliced.ok());
    // The one-pass reference: the fold of HashBytes written out for the test.
    constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
    uint64_t h = 5 ^ (n * kMul);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, part.data() + i, 8);
      h = (h ^ w) * kMul;
      h ^= h >> 29;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, part.data() + i, n - i);
    h = (h ^ tail ^ (uint64_t{n - i} << 56)) * kMul;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    EXPECT_EQ(*sliced, h ^ (h >> 32)) << n;
    EXPECT_EQ(HashBytes(part, 5), *sliced) << n;
  }
  StopToken stop;
  stop.RequestStop();
  EXPECT_EQ(HashBytes(bytes, 0, &stop).status().code(), absl::StatusCode::kCancelled);
  absl::StatusOr<std::string> key = TokenCacheKey("/data/x.jsonl", bytes, 1, 2, "s", &stop);
  EXPECT_EQ(key.status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace slidedp

namespace slidedp {
namespace {

// A preset's random weights are filled tensor by tensor; a stop is seen between them.
TEST(Stop, RandomInitializationStops) {
  HostState state(PresetConfig("tiny").value(), at::kFloat, 0, false);
  StopToken stop;
  EXPECT_TRUE(state.InitRandom(1, &stop).ok());
  stop.RequestStop();
  EXPECT_EQ(state.InitRandom(1, &stop).code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace slidedp
