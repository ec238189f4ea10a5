// Tests of loading and saving Hugging Face model folders: single-file and sharded round
// trips in F32 and BF16, tied embeddings, the reference fixtures written by transformers,
// and folders whose weights do not fit the config.
#include "runtime/model/hf_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/model/safetensors.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / (std::string("hf_") + info->name()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

ModelConfig SmallLlama(bool tie) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.tie_word_embeddings = tie;
  return c;
}

// Random values for every parameter of a layout, one vector per (unit, param).
using Weights = std::vector<std::vector<std::vector<float>>>;

Weights RandomWeights(const ModelLayout& layout, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Weights w(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const ParamSpec& p : layout.units[u].params) {
      std::vector<float> v(p.numel);
      for (float& x : v) x = dist(rng);
      w[u].push_back(std::move(v));
    }
  }
  return w;
}

Weights ZeroLike(const Weights& w) {
  Weights z = w;
  for (auto& unit : z) for (auto& v : unit) std::fill(v.begin(), v.end(), -99.0f);
  return z;
}

absl::Status Save(const std::string& dir, const ModelConfig& c, const Weights& w, const std::string& dtype,
                  int64_t shard_bytes = int64_t{1} << 30) {
  return SaveHfModel(dir, c, BuildLayout(c), [&](int u, int p) { return w[u][p].data(); }, dtype, shard_bytes);
}

absl::Status Load(const std::string& dir, const ModelConfig& c, Weights& w) {
  return LoadHfWeights(dir, BuildLayout(c), [&](int u, int p) { return w[u][p].data(); });
}

TEST(HfCheckpointTest, F32RoundTripIsExactAndWritesALoadableConfig) {
  const ModelConfig c = SmallLlama(false);
  const std::string dir = TempDir("m");
  const Weights w = RandomWeights(BuildLayout(c), 1);
  ASSERT_TRUE(Save(dir, c, w, "F32").ok());
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  absl::StatusOr<ModelConfig> back_config = LoadModelConfig(dir);
  ASSERT_TRUE(back_config.ok()) << back_config.status();
  EXPECT_EQ(back_config->hidden_size, 16);
  EXPECT_TRUE(back_config->mlp_bias);
  Weights r = ZeroLike(w);
  absl::Status s = Load(dir, *back_config, r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r, w);
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->metadata().at("format"), "pt");  // transformers refuses files without it
}

TEST(HfCheckpointTest, Bf16RoundTripRoundsToNearestEven) {
  const ModelConfig c = SmallLlama(true);
  const std::string dir = TempDir("m");
  const Weights w = RandomWeights(BuildLayout(c), 2);
  ASSERT_TRUE(Save(dir, c, w, "BF16").ok());
  Weights r = ZeroLike(w);
  ASSERT_TRUE(Load(dir, c, r).ok());
  for (size_t u = 0; u < w.size(); ++u) {
    for (size_t p = 0; p < w[u].size(); ++p) {
      for (size_t i = 0; i < w[u][p].size(); ++i) {
        ASSERT_EQ(r[u][p][i], Bf16ToFloat(FloatToBf16(w[u][p][i])));
      }
    }
  }
}

TEST(HfCheckpointTest, ShardedRoundTripAndSwitchBackToOneFile) {
  const ModelConfig c = SmallLlama(false);
  const ModelLayout layout = BuildLayout(c);
  const std::string dir = TempDir("m");
  const Weights w = RandomWeights(layout, 3);
  ASSERT_TRUE(Save(dir, c, w, "F32", 4096).ok());
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  std::ifstream in(dir + "/model.safetensors.index.json");
  nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), layout.total_numel * 4);
  std::set<std::string> shards;
  for (const auto& [tensor, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  const std::string last = "model-" + std::string(5 - std::to_string(shards.size()).size(), '0') +
                           std::to_string(shards.size()) + "-of-";
  EXPECT_EQ(shards.rbegin()->rfind(last, 0), 0u) << *shards.rbegin();
  for (const std::string& s : shards) {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir + "/" + s);
    ASSERT_TRUE(f.ok());
    uint64_t bytes = 0;
    for (const auto& t : f->tensors()) bytes += t.end - t.begin;
    EXPECT_TRUE(bytes <= 4096 || f->tensors().size() == 1) << s;
  }
  Weights r = ZeroLike(w);
  ASSERT_TRUE(Load(dir, c, r).ok());
  EXPECT_EQ(r, w);

  ASSERT_TRUE(Save(dir, c, w, "F32").ok());  // the same folder, one file now
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  r = ZeroLike(w);
  ASSERT_TRUE(Load(dir, c, r).ok());
  EXPECT_EQ(r, w);
}

// Writes DIR/model.safetensors holding `w` under its layout names, plus `extra` tensors,
// leaving out the tensor called `skip`.
void WriteRaw(const std::string& dir, const ModelLayout& layout, const Weights& w,
              std::vector<TensorToWrite> extra, const std::string& skip = "") {
  std::vector<TensorToWrite> t = std::move(extra);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (size_t p = 0; p < layout.units[u].params.size(); ++p) {
      const ParamSpec& s = layout.units[u].params[p];
      if (s.name != skip) t.push_back({s.name, SafetensorsDtype::kF32, s.shape, w[u][p].data()});
    }
  }
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", t, {{"format", "pt"}}).ok());
}

TEST(HfCheckpointTest, TiedHeadAndRotaryBuffersAreIgnored) {
  const ModelConfig c = SmallLlama(true);
  const ModelLayout layout = BuildLayout(c);
  const std::string dir = TempDir("m");
  const Weights w = RandomWeights(layout, 4);
  std::vector<float> head(c.vocab_size * c.hidden_size, 5.0f), inv(2, 1.0f);
  WriteRaw(dir, layout, w,
           {{"lm_head.weight", SafetensorsDtype::kF32, {c.vocab_size, c.hidden_size}, head.data()},
            {"model.layers.0.self_attn.rotary_emb.inv_freq", SafetensorsDtype::kF32, {2}, inv.data()}});
  Weights r = ZeroLike(w);
  absl::Status s = Load(dir, c, r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r, w);
}

void ExpectLoadError(const std::string& dir, const ModelConfig& c, std::vector<std::string> parts) {
  Weights r = RandomWeights(BuildLayout(c), 0);
  absl::Status s = Load(dir, c, r);
  ASSERT_FALSE(s.ok());
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), absl::string_view::npos) << s;
}

TEST(HfCheckpointTest, WrongShapeNamesFileTensorAndShapes) {
  ModelConfig c = SmallLlama(false);
  const std::string dir = TempDir("m");
  ASSERT_TRUE(Save(dir, c, RandomWeights(BuildLayout(c), 5), "F32").ok());
  ModelConfig other = c;
  other.intermediate_size = 20;
  ExpectLoadError(dir, other, {"model.safetensors", "model.layers.0.mlp.down_proj.weight", "[16, 24]", "[16, 20]"});
}

TEST(HfCheckpointTest, MissingAndExtraTensors) {
  const ModelConfig c = SmallLlama(false);
  const ModelLayout layout = BuildLayout(c);
  const Weights w = RandomWeights(layout, 6);
  const std::string missing = TempDir("missing");
  WriteRaw(missing, layout, w, {}, "model.layers.1.mlp.up_proj.bias");
  ExpectLoadError(missing, c, {"model.layers.1.mlp.up_proj.bias", "missing", "[24]"});

  const std::string untied_head = TempDir("untied_head");
  WriteRaw(untied_head, layout, w, {}, "lm_head.weight");
  ExpectLoadError(untied_head, c, {"lm_head.weight", "missing"});

  const std::string extra = TempDir("extra");
  std::vector<float> x(3, 0.0f);
  WriteRaw(extra, layout, w, {{"model.layers.7.mlp.up_proj.weight", SafetensorsDtype::kF32, {3}, x.data()}});
  ExpectLoadError(extra, c, {"model.layers.7.mlp.up_proj.weight", "not a parameter"});

  // A config without biases reading a checkpoint that has them: the biases are extra.
  ModelConfig no_bias = c;
  no_bias.qkv_bias = no_bias.o_bias = no_bias.mlp_bias = false;
  ExpectLoadError(extra, no_bias, {".bias", "not a parameter"});
}

TEST(HfCheckpointTest, BrokenFoldersAndIndexes) {
  const ModelConfig c = SmallLlama(false);
  Weights r = RandomWeights(BuildLayout(c), 0);
  const std::string empty = TempDir("empty");
  EXPECT_EQ(Load(empty, c, r).code(), absl::StatusCode::kNotFound);

  const std::string dir = TempDir("sharded");
  ASSERT_TRUE(Save(dir, c, RandomWeights(BuildLayout(c), 7), "F32", 4096).ok());
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::ifstream in(index_path);
  nlohmann::json index = nlohmann::json::parse(in);
  in.close();
  auto rewrite = [&](const nlohmann::json& j) { std::ofstream(index_path) << j.dump(); };

  nlohmann::json bad = index;
  bad["weight_map"]["model.norm.weight"] = "model-99999-of-99999.safetensors";
  rewrite(bad);
  ExpectLoadError(dir, c, {"model-99999-of-99999.safetensors"});
  bad = index;
  bad["weight_map"]["model.norm.weight"] = "../escape.safetensors";
  rewrite(bad);
  ExpectLoadError(dir, c, {"model.norm.weight", "not a file name"});
  bad = index;
  bad["weight_map"].erase("model.norm.weight");
  rewrite(bad);
  ExpectLoadError(dir, c, {"model.norm.weight"});  // unmapped, or missing with its file
  rewrite(nlohmann::json::array());
  ExpectLoadError(dir, c, {"model.safetensors.index.json"});
  std::ofstream(index_path) << "{ not json";
  ExpectLoadError(dir, c, {"model.safetensors.index.json"});
  rewrite(index);
  EXPECT_TRUE(Load(dir, c, r).ok());

  const std::string shard = index["weight_map"]["model.norm.weight"].get<std::string>();
  std::ofstream(dir + "/" + shard, std::ios::trunc) << "garbage";
  ExpectLoadError(dir, c, {shard, "shorter than"});
}

TEST(HfCheckpointTest, SaveRejectsBadArguments) {
  const ModelConfig c = SmallLlama(false);
  const Weights w = RandomWeights(BuildLayout(c), 8);
  const std::string dir = TempDir("m");
  EXPECT_FALSE(Save(dir, c, w, "F16").ok());
  EXPECT_FALSE(Save(dir, c, w, "F32", 0).ok());
  ModelConfig other = c;
  other.num_layers = 3;
  EXPECT_FALSE(SaveHfModel(dir, other, BuildLayout(c), [&](int u, int p) { return w[u][p].data(); }, "F32", 1 << 20).ok());
  EXPECT_FALSE(SaveHfModel(dir, c, BuildLayout(c), [&](int, int) -> const float* { return nullptr; }, "F32", 1 << 20).ok());
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void Put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The export's side files: the tokenizer and its configuration from the tokenizer's
// folder, generation_config.json from the model's, byte for byte; missing ones skipped.
TEST(HfCheckpointTest, CopiesTheTokenizerAndGenerationConfigBesideTheWeights) {
  const std::string model = TempDir("model"), tok = TempDir("tok"), out = TempDir("out");
  Put(model + "/generation_config.json", "{\"bos_token_id\": 1}\n");
  Put(tok + "/tokenizer.json", std::string("{\"model\": {}}\n\0binary", 20));
  Put(tok + "/tokenizer_config.json", "{}\n");
  Put(tok + "/tokenizer.model", std::string("\x0a\x00sp", 4));
  absl::StatusOr<std::vector<std::string>> names = CopyHfSideFiles(model, tok, out);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                                              "generation_config.json"}));
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"}) {
    EXPECT_EQ(Slurp(out + "/" + name), Slurp(tok + "/" + name)) << name;
  }
  EXPECT_EQ(Slurp(out + "/generation_config.json"), Slurp(model + "/generation_config.json"));
  EXPECT_FALSE(fs::exists(out + "/special_tokens_map.json"));

  // A tokenizer file of another name: that file alone, as tokenizer.json.
  const std::string out2 = TempDir("out2");
  Put(tok + "/llama_tok.json", "{\"other\": 1}\n");
  names = CopyHfSideFiles("", tok + "/llama_tok.json", out2);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, std::vector<std::string>{"tokenizer.json"});
  EXPECT_EQ(Slurp(out2 + "/tokenizer.json"), "{\"other\": 1}\n");

  // Nothing to copy (a preset and no tokenizer): nothing written.
  names = CopyHfSideFiles("", "", TempDir("out3"));
  ASSERT_TRUE(names.ok());
  EXPECT_TRUE(names->empty());

  // A tokenizer.json that is a folder: an error naming it, not a silent export without it.
  const std::string odd = TempDir("odd");
  fs::create_directories(odd + "/tokenizer.json");
  names = CopyHfSideFiles("", odd, TempDir("out4"));
  ASSERT_FALSE(names.ok());
  EXPECT_NE(names.status().message().find("tokenizer.json"), std::string::npos) << names.status();
}

TEST(HfCheckpointTest, LoadsTheTransformersFixtures) {
  const std::string root = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/";
  if (!fs::exists(root + "qwen2/config.json")) GTEST_SKIP() << "no fixtures under " << root;
  for (const char* family : {"llama", "qwen2", "qwen3"}) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(root + family);
    ASSERT_TRUE(c.ok()) << c.status();
    Weights r = RandomWeights(BuildLayout(*c), 0);
    for (auto& unit : r) for (auto& v : unit) std::fill(v.begin(), v.end(), std::nanf(""));
    absl::Status s = Load(root + family, *c, r);
    ASSERT_TRUE(s.ok()) << family << ": " << s;
    for (const auto& unit : r) {
      for (const auto& v : unit) {
        for (float x : v) ASSERT_TRUE(std::isfinite(x)) << family;
      }
    }
  }
}

}  // namespace
}  // namespace slidedp
