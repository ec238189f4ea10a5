// stories260K end to end on the CPU device: a real trained Llama model (llama2.c's
// TinyStories model, a copy of ../shared/models/stories260K in tests/reference/fixtures/stories260k/model) with its own
// SentencePiece-style tokenizer. Its loss on a fixed story with its own tokenizer is that
// of a model that knows the text (a wrong tokenization or layout would be near chance,
// ln 512 = 6.2), and equals transformers' within 1e-5 where the fixture of
// tests/reference/make_stories260k_fixture.py is present; a short fine-tune through the
// trainer on text data with that tokenizer lowers the eval loss; greedy decoding
// continues "Once upon a time" as the original checkpoint does.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/full_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"
#include "runtime/state/host_state.h"

namespace slidedp {
namespace {

const std::string kModelDir = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/stories260k/model";
const std::string kFixture =
    std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/stories260k/reference.safetensors";

// The fixed text (also in tests/reference/make_stories260k_fixture.py).
constexpr char kStory[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big red ball under a tree. She ran to get it and smiled.";

// The model's mean next-token loss on `ids` (one sequence), and its logits.
double Loss(const ModelConfig& config, HostState& state, const std::vector<int32_t>& ids,
            at::Tensor* logits_out = nullptr) {
  std::vector<int64_t> wide(ids.begin(), ids.end());
  const int64_t T = static_cast<int64_t>(wide.size());
  at::Tensor input = at::tensor(wide, at::kLong).reshape({1, T});
  std::vector<at::Tensor> flats;
  for (int u = 0; u < state.layout().num_units(); ++u) flats.push_back(state.unit(u).master);
  at::Tensor logits = FullModelLogits(config, state.layout(), flats, input);
  at::Tensor loss = at::cross_entropy_loss(logits.narrow(1, 0, T - 1).reshape({-1, config.vocab_size}),
                                           input.narrow(1, 1, T - 1).reshape({-1}));
  if (logits_out != nullptr) *logits_out = logits;
  return loss.item<double>();
}

// The model, its tokenizer and transformers' fixture (absent until made).
struct Stories {
  ModelConfig config;
  std::unique_ptr<HostState> state;
  std::unique_ptr<Tokenizer> tok;
  std::optional<SafetensorsFile> ref;

  void Load() {
    ASSERT_TRUE(std::filesystem::exists(kModelDir + "/config.json")) << kModelDir;
    absl::StatusOr<ModelConfig> c = LoadModelConfig(kModelDir);
    ASSERT_TRUE(c.ok()) << c.status();
    config = *c;
    state = std::make_unique<HostState>(config, at::kFloat, 0, false);
    ASSERT_TRUE(state->LoadHf(kModelDir).ok());
    auto t = Tokenizer::Load(kModelDir);
    ASSERT_TRUE(t.ok()) << t.status();
    tok = *std::move(t);
    if (std::filesystem::exists(kFixture)) {
      absl::StatusOr<SafetensorsFile> r = SafetensorsFile::Open(kFixture);
      ASSERT_TRUE(r.ok()) << r.status();
      ref.emplace(*std::move(r));
    }
  }
  at::Tensor Read(const std::string& name) const {
    const SafetensorsTensorInfo* info = ref->Find(name);
    EXPECT_NE(info, nullptr) << name;
    if (info == nullptr) return at::Tensor();
    at::Tensor t = at::empty(info->shape, at::kFloat);
    EXPECT_TRUE(ref->ReadAsFloat(name, t.data_ptr<float>(), info->numel).ok()) << name;
    return t;
  }
  // Greedy continuation of `prompt` (with <s>) by our forward: prompt and new ids.
  std::vector<int32_t> Greedy(const std::string& prompt, int tokens) const {
    std::vector<int32_t> ids = tok->Encode(prompt, /*add_special_tokens=*/true);
    std::vector<at::Tensor> flats;
    for (int u = 0; u < state->layout().num_units(); ++u) flats.push_back(state->unit(u).master);
    for (int k = 0; k < tokens; ++k) {
      std::vector<int64_t> wide(ids.begin(), ids.end());
      at::Tensor input = at::tensor(wide, at::kLong).reshape({1, static_cast<int64_t>(wide.size())});
      at::Tensor logits = FullModelLogits(config, state->layout(), flats, input);
      ids.push_back(static_cast<int32_t>(logits[0][-1].argmax().item<int64_t>()));
    }
    return ids;
  }
};

TEST(Stories260k, ItsTokenizerAndWeightsGiveTheLossOfATrainedModel) {
  Stories s;
  ASSERT_NO_FATAL_FAILURE(s.Load());
  const std::vector<int32_t> ids = s.tok->Encode(kStory, /*add_special_tokens=*/true);
  ASSERT_EQ(ids[0], 1);  // <s>
  const double loss = Loss(s.config, *s.state, ids);
  EXPECT_LT(loss, 2.0) << "a trained TinyStories model on a TinyStories sentence";
  // The same tokens in another order are far less likely: the loss above is the model's
  // knowledge of this text, not of its token frequencies.
  std::vector<int32_t> reversed(ids.begin() + 1, ids.end());
  std::reverse(reversed.begin(), reversed.end());
  reversed.insert(reversed.begin(), 1);
  EXPECT_GT(Loss(s.config, *s.state, reversed), loss + 2.0);
}

TEST(Stories260k, IdsLogitsAndLossMatchTransformers) {
  Stories s;
  ASSERT_NO_FATAL_FAILURE(s.Load());
  if (!s.ref) {
    GTEST_SKIP() << kFixture << " is not made yet (tests/reference/make_stories260k_fixture.py on "
                 << "the GPU host)";
  }
  const std::vector<int32_t> ids = s.tok->Encode(kStory, /*add_special_tokens=*/true);
  at::Tensor logits;
  const double loss = Loss(s.config, *s.state, ids, &logits);
  // transformers' tokenizer gave the same ids ...
  const at::Tensor want_ids = s.Read("input_ids").reshape({-1});
  ASSERT_EQ(want_ids.numel(), static_cast<int64_t>(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(static_cast<int64_t>(want_ids[i].item<float>()), ids[i]) << i;
  // ... and its model the same logits and loss.
  const at::Tensor want_logits = s.Read("logits").reshape(logits.sizes());
  // Relative: the norm of the difference over the reference's (as hf_reference_test).
  EXPECT_LT((logits - want_logits).norm().item<double>() / want_logits.norm().item<double>(), 1e-5);
  EXPECT_NEAR(loss, s.Read("loss").item<double>(), 1e-5);
}

// Greedy decoding with our forward continues "Once upon a time" as the model's README
// says a numpy forward of the original checkpoint does ...
TEST(Stories260k, GreedyContinuationIsTheOriginalCheckpointsOne) {
  Stories s;
  ASSERT_NO_FATAL_FAILURE(s.Load());
  const std::string text = s.tok->Decode(s.Greedy("Once upon a time", 40), /*skip_special_tokens=*/true);
  EXPECT_EQ(text.rfind("Once upon a time, there was a little girl named Lily. She loved to play "
                       "outside in the park", 0), 0u) << text;
}

// ... and token for token as transformers' generate does.
TEST(Stories260k, GreedyTokensMatchTransformers) {
  Stories s;
  ASSERT_NO_FATAL_FAILURE(s.Load());
  if (!s.ref) GTEST_SKIP() << kFixture << " is not made yet";
  const std::vector<int32_t> ids = s.Greedy("Once upon a time", 40);
  const at::Tensor want = s.Read("greedy").reshape({-1});
  ASSERT_EQ(want.numel(), static_cast<int64_t>(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(static_cast<int64_t>(want[i].item<float>()), ids[i]) << i;
}

TEST(Stories260k, FineTuneOnTextWithItsTokenizerLowersTheEvalLoss) {
  ASSERT_TRUE(std::filesystem::exists(kModelDir + "/config.json")) << kModelDir;
  const std::string dir = ::testing::TempDir() + "/stories260k_finetune";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // A story the model has not seen, in its style, with words it has.
  const std::string story =
      "Ben had a blue kite. The wind was strong and the kite flew up high. Ben laughed and "
      "ran after it. His dog Max ran too. They were very happy.";
  {
    std::ofstream train(dir + "/train.jsonl");
    for (int i = 0; i < 40; ++i) train << R"({"text": ")" << story << "\"}\n";
    std::ofstream eval(dir + "/eval.jsonl");
    eval << R"({"text": ")" << story << "\"}\n";
  }
  TrainConfig c;
  c.model = kModelDir;  // its tokenizer.json is the data's tokenizer
  c.data.format = DataFormat::kText;
  c.data.path = dir + "/train.jsonl";
  c.data.cache_dir = dir + "/cache";
  c.data.eval_path = dir + "/eval.jsonl";
  c.eval_interval = 1;
  c.eval_batches = 1;
  c.seq_len = 64;
  c.micro_batch_size = 2;
  c.grad_accum = 1;
  c.steps = 8;
  c.optimizer.lr = 3e-3;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<double> eval;
  for (int64_t k = 0; k < c.steps; ++k) {
    absl::StatusOr<StepStats> s = (*t)->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(s->eval_loss.has_value());
    eval.push_back(*s->eval_loss);
  }
  EXPECT_TRUE(std::isfinite(eval.front()));
  EXPECT_LT(eval.back(), eval.front() - 0.1) << "first " << eval.front() << ", last " << eval.back();

  // The export carries the model's tokenizer and generation config beside the weights,
  // byte for byte, so that it loads and generates by itself (transformers' check:
  // tests/reference/check_trained_export.sh on the GPU host).
  const std::string exported = dir + "/export";
  ASSERT_TRUE((*t)->ExportHf(exported).ok());
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json"}) {
    std::ifstream a(kModelDir + "/" + name, std::ios::binary), b(exported + "/" + name, std::ios::binary);
    ASSERT_TRUE(a && b) << name;
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}), std::string(std::istreambuf_iterator<char>(b), {}))
        << name;
  }
  auto original = Tokenizer::Load(kModelDir);
  auto copied = Tokenizer::Load(exported);
  ASSERT_TRUE(original.ok() && copied.ok());
  EXPECT_EQ((*copied)->Encode(story, true), (*original)->Encode(story, true));
}

}  // namespace
}  // namespace slidedp
