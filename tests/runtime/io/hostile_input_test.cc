// Tests of what every reader of user input does with hostile input (issue 18): JSON and
// YAML nested 200000 deep (which crashed the daemon in the JSON library's recursive
// serializer) is refused with an error naming the file and the line, in every reader:
// jsonl, text records, data cursors, tokenizer.json, config.json, index.json,
// safetensors and checkpoint headers, job files; and error messages repeat at most a
// bounded piece of what the user sent (a 100 KB data line, a 4 KB field name).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/test_support.h"
#include "runtime/data/data_cursor.h"
#include "runtime/data/jsonl_tokens.h"
#include "runtime/data/text_records.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/io/json_nesting.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"
#include "runtime/state/checkpoint.h"
#include "runtime/train_config.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

constexpr size_t kDeep = 200000;
constexpr size_t kMaxMessage = 1024;

std::string Deep(char open, char close, size_t n = kDeep) {
  return std::string(n, open) + std::string(n, close);
}

std::string TestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::path(::testing::TempDir()) / (std::string("hostile_") + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// `s` is an INVALID_ARGUMENT (or `code`) error containing every one of `parts`, short.
void ExpectRefused(const absl::Status& s, std::vector<std::string> parts,
                   absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& part : parts) EXPECT_TRUE(absl::StrContains(s.message(), part)) << s;
  EXPECT_LT(s.message().size(), kMaxMessage) << s.message().substr(0, 2000);
}

// ---------------------------------------------------------------- the scanners

TEST(NestingTest, JsonDepthAndLine) {
  EXPECT_EQ(JsonNestingDepth("[1, [2, {\"a\": [3]}]]"), 4);
  EXPECT_EQ(JsonNestingDepth("\"[[[[\""), 0);             // inside a string
  EXPECT_EQ(JsonNestingDepth("]]]][[[]]]"), 3);           // stray closers do not hide depth
  EXPECT_EQ(JsonNestingExceeded("{\n\"a\":\n[[[1]]]}", 3), 3);
  EXPECT_EQ(JsonNestingExceeded("[[1]]", 2), 0);
}

TEST(NestingTest, YamlIsConservative) {
  EXPECT_EQ(YamlNestingExceeded("model: tiny\ndata:\n  format: jsonl\n  path: /d/x\n", 8), 0);
  EXPECT_EQ(YamlNestingExceeded("a: 1\nb: " + std::string(100, '['), 64), 2);
  EXPECT_EQ(YamlNestingExceeded("a: 1\nb: \"]\" [ \"]\" [ \"]\" [", 2), 2);  // quotes hide nothing
  std::string block = "a:\n";
  for (int i = 0; i < 100; ++i) block += "- ";
  EXPECT_EQ(YamlNestingExceeded(block + "x\n", 64), 2);
  EXPECT_EQ(YamlNestingExceeded("a:\n" + std::string(100, ' ') + "b: 1\n", 64), 2);
}

// ---------------------------------------------------------------- data formats

TEST(HostileInputTest, DeeplyNestedJsonlLineIsRefusedNotACrash) {
  // Once a segfault: the element was serialized with dump() for the message.
  absl::Status s = ParseJsonlTokens("[1, 2]\n" + Deep('[', ']') + "\n", "train.jsonl", 100).status();
  ExpectRefused(s, {"train.jsonl:2:", "nested deeper than"});
  s = ParseJsonlTokens("{\"tokens\": [1, " + Deep('[', ']') + "]}\n", "train.jsonl", 100).status();
  ExpectRefused(s, {"train.jsonl:1:", "nested deeper than"});
  s = ParseJsonlTokens(Deep('{', '}') + "\n", "train.jsonl", 100).status();
  ExpectRefused(s, {"train.jsonl:1:"});
  // Through the file as well.
  const std::string path = WriteFile(TestDir() + "/deep.jsonl", Deep('[', ']') + "\n");
  ExpectRefused(LoadJsonlTokens(path, 100).status(), {path + ":1:", "nested deeper than"});
}

TEST(HostileInputTest, DeeplyNestedTextRecordAndCursorAreRefused) {
  for (TextFormat format : {TextFormat::kText, TextFormat::kPromptCompletion, TextFormat::kChat}) {
    ExpectRefused(ParseTextRecord("{\"text\": " + Deep('[', ']') + "}", format).status(), {"nested deeper than"});
    ExpectRefused(ParseTextRecord(Deep('[', ']'), format).status(), {"nested deeper than"});
  }
  ExpectRefused(ParseDataCursor(Deep('[', ']')).status(), {"data cursor", "nested deeper than"});
}

TEST(HostileInputTest, LongBadDataLinesAreEchoedShort) {
  const std::string big(100000, 'x');
  // Not valid JSON, with 100 KB in the parser's "last read".
  ExpectRefused(ParseJsonlTokens("[\"" + big + "\n", "train.jsonl", 100).status(), {"train.jsonl:1:", "not valid JSON"});
  ExpectRefused(ParseJsonlTokens("[1, 2 " + big + "]\n", "train.jsonl", 100).status(), {"train.jsonl:1:"});
  // A bad element of 100 KB.
  ExpectRefused(ParseJsonlTokens("[1, \"" + big + "\"]\n", "train.jsonl", 100).status(),
                {"train.jsonl:1:", "element 1", "bytes)"});
  ExpectRefused(ParseJsonlTokens("[1, [[[[" + big + "]]]]]\n", "train.jsonl", 100).status(), {"train.jsonl:1:"});
  // Text records: a bad role, a bad line.
  ExpectRefused(ParseTextRecord("{\"messages\": [{\"role\": \"" + big + "\", \"content\": \"x\"}]}",
                                TextFormat::kChat).status(), {"role"});
  ExpectRefused(ParseTextRecord("{\"text\": \"" + big, TextFormat::kText).status(), {"not valid JSON"});
  // A data.format of 100 KB (the config's enum: named, echoed short).
  ExpectRefused(ParseTrainConfig("data:\n  format: " + big + "\n", "job.yaml").status(), {"data.format"});
  // A cursor from a checkpoint of 100 KB.
  ExpectRefused(ParseDataCursor("{\"cursor\": \"" + big + "\"}").status(), {"data cursor"});
}

// ---------------------------------------------------------------- model files

TEST(HostileInputTest, DeeplyNestedTokenizerJsonIsRefused) {
  ExpectRefused(Tokenizer::FromJson("{\"model\":\n" + Deep('[', ']') + "}", "tokenizer.json").status(),
                {"tokenizer.json", "line 2", "nested deeper than"});
  ExpectRefused(Tokenizer::FromJson("{\"normalizer\": " + Deep('{', '}') + "}", "tokenizer.json").status(),
                {"tokenizer.json", "nested deeper than"});
  const std::string path = WriteFile(TestDir() + "/tokenizer.json", Deep('[', ']'));
  ExpectRefused(Tokenizer::Load(path).status(), {path, "nested deeper than"});
  // A 100 KB bad entry is echoed short.
  ExpectRefused(Tokenizer::FromJson("{\"normalizer\": {\"type\": \"" + std::string(100000, 'n') + "\"}}",
                                    "tokenizer.json").status(),
                {"tokenizer.json", "normalizer type"});
}

TEST(HostileInputTest, DeeplyNestedConfigIndexAndSafetensorsAreRefused) {
  const std::string dir = TestDir();
  WriteFile(dir + "/config.json", "{\n\"model_type\": \"llama\",\n\"x\": " + Deep('[', ']') + "}");
  ExpectRefused(LoadModelConfig(dir).status(), {dir + "/config.json:3:", "nested deeper than"});
  ExpectRefused(ParseModelConfigJson("{\"model_type\": \"" + std::string(100000, 'q') + "\"}", "config.json").status(),
                {"config.json", "unsupported model type"});

  const ModelLayout layout = BuildLayout(testing::TinyLlamaConfig());
  std::vector<float> sink(1 << 16);
  auto dest = [&](int, int) { return sink.data(); };
  WriteFile(dir + "/model.safetensors.index.json", "{\"weight_map\":\n" + Deep('{', '}') + "}");
  ExpectRefused(LoadHfWeights(dir, layout, dest), {"model.safetensors.index.json':2:", "nested deeper than"});

  std::string header = Deep('[', ']');
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  ExpectRefused(SafetensorsFile::FromBuffer("deep.safetensors", bytes + header).status(),
                {"deep.safetensors", "nested deeper than"});
}

// Shards named by index.json are plain names inside the model folder.
TEST(HostileInputTest, IndexNamingAFileOutsideTheModelFolderIsRefused) {
  const std::string dir = TestDir();
  fs::create_directories(dir + "/model");
  WriteFile(dir + "/outside.safetensors", "not read");
  ModelConfig c = *PresetConfig("tiny");
  const ModelLayout layout = BuildLayout(c);
  std::vector<float> sink(static_cast<size_t>(layout.total_numel) + 1);
  auto dest = [&](int, int) { return sink.data(); };
  for (const std::string& name : {std::string("../outside.safetensors"), dir + "/outside.safetensors",
                                  std::string(".."), std::string("sub/x.safetensors")}) {
    WriteFile(dir + "/model/model.safetensors.index.json",
              "{\"weight_map\": {\"embed_tokens.weight\": \"" + name + "\"}}");
    absl::Status s = LoadHfWeights(dir + "/model", layout, dest);
    ExpectRefused(s, {"model.safetensors.index.json", "embed_tokens.weight", name,
                      "not a file name in the model folder"});
  }
}

TEST(HostileInputTest, DeeplyNestedCheckpointHeaderIsDataLoss) {
  const std::string header = Deep('[', ']');
  std::string bytes = "SLDPCKPT";
  const uint32_t version[2] = {static_cast<uint32_t>(kCheckpointVersion), 0};
  const uint64_t n = header.size();
  bytes.append(reinterpret_cast<const char*>(version), 8);
  bytes.append(reinterpret_cast<const char*>(&n), 8);
  bytes += header;
  const std::string path = WriteFile(TestDir() + "/ckpt-000000001.slidedp", bytes);
  ExpectRefused(ReadCheckpointMeta(path).status(), {path, "nested deeper than"}, absl::StatusCode::kDataLoss);
  ExpectRefused(ReadCheckpoint(path, {}).status(), {path, "nested deeper than"}, absl::StatusCode::kDataLoss);
}

// ---------------------------------------------------------------- job files

TEST(HostileInputTest, DeeplyNestedJobFilesAreRefused) {
  ExpectRefused(ParseTrainConfig("model: tiny\ndata: " + Deep('[', ']'), "job.yaml").status(),
                {"job.yaml at line 2", "nested deeper than"});
  ExpectRefused(ParseTrainConfig(Deep('{', '}'), "job.json").status(), {"job.json at line 1"});
  std::string block = "model: tiny\ndata:\n";
  for (int i = 0; i < 100000; ++i) block += "- ";
  ExpectRefused(ParseTrainConfig(block + "x\n", "job.yaml").status(), {"job.yaml at line 3", "nested deeper than"});
  std::string indented = "model: tiny\n";
  for (int i = 0; i < 1000; ++i) indented += std::string(i, ' ') + "a" + std::to_string(i) + ":\n";
  ExpectRefused(ParseTrainConfig(indented, "job.yaml").status(), {"job.yaml at line", "nested deeper than"});
  // Bigger than a job file could be.
  ExpectRefused(ParseTrainConfig(std::string(2 << 20, '#'), "job.yaml").status(), {"job.yaml", "limit"});
  const std::string path = WriteFile(TestDir() + "/job.yaml", "model: " + Deep('[', ']'));
  ExpectRefused(LoadTrainConfig(path).status(), {path, "nested deeper than"});
  // What is written into checkpoints reads back.
  TrainConfig config;
  EXPECT_TRUE(ParseTrainConfig(TrainConfigToJson(config), "checkpoint").ok());
}

TEST(HostileInputTest, LongJobFileNamesAndValuesAreEchoedShort) {
  const std::string name(4096, 'f');
  // (YAML allows plain keys of 1024 characters at most; longer ones are explicit "? KEY".)
  ExpectRefused(ParseTrainConfig("? " + name + "\n: 1\n", "job.yaml").status(), {"unknown field", "job.yaml at line 1"});
  ExpectRefused(ParseTrainConfig("data:\n  ? " + name + "\n  : 1\n", "job.yaml").status(), {"unknown field"});
  ExpectRefused(ParseTrainConfig("seq_len: " + name + "\n", "job.yaml").status(), {"seq_len"});
  ExpectRefused(ParseTrainConfig("device: " + name + "\n", "job.yaml").status(), {"device"});
  ExpectRefused(ParseTrainConfig("model: tiny\n? " + name + "\n: 1\n? " + name + "\n: 2\n", "job.yaml").status(),
                {"job.yaml"});
  ExpectRefused(ParseTrainConfig("x: 1\n", "/" + name + "/job.yaml").status(), {"unknown field"});
}

}  // namespace
}  // namespace slidedp
