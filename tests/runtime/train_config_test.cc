// TrainConfig: full YAML and JSON files, defaults, the JSON round trip, and every kind
// of error naming its field (and line, where the field is in the file).
#include "runtime/train_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace slidedp {
namespace {

// The message `text` (a std::string) contains `part`; prints the message when not.
#define EXPECT_CONTAINS(text, part)                                               \
  do {                                                                            \
    const std::string message_ = (text);                                          \
    EXPECT_NE(message_.find(part), std::string::npos) << "message: " << message_; \
  } while (0)

// Field by field, so a round trip that drops a field fails here.
void ExpectSameConfig(const TrainConfig& a, const TrainConfig& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.data.format, b.data.format);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.token_dtype, b.data.token_dtype);
  EXPECT_EQ(a.data.shuffle, b.data.shuffle);
  EXPECT_EQ(a.data.tokenizer, b.data.tokenizer);
  EXPECT_EQ(a.data.cache_dir, b.data.cache_dir);
  EXPECT_EQ(a.data.skip_bad_lines, b.data.skip_bad_lines);
  EXPECT_EQ(a.data.document_mask, b.data.document_mask);
  EXPECT_EQ(a.data.eval_path, b.data.eval_path);
  EXPECT_EQ(a.eval_interval, b.eval_interval);
  EXPECT_EQ(a.eval_batches, b.eval_batches);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.micro_batch_size, b.micro_batch_size);
  EXPECT_EQ(a.grad_accum, b.grad_accum);
  EXPECT_EQ(a.workers, b.workers);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.compute_dtype, b.compute_dtype);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.min_lr_ratio, b.optimizer.min_lr_ratio);
  EXPECT_EQ(a.optimizer.warmup_steps, b.optimizer.warmup_steps);
  EXPECT_EQ(a.optimizer.schedule, b.optimizer.schedule);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.max_grad_norm, b.optimizer.max_grad_norm);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.checkpoint_dir, b.checkpoint_dir);
  EXPECT_EQ(a.checkpoint_interval, b.checkpoint_interval);
  EXPECT_EQ(a.keep_checkpoints, b.keep_checkpoints);
  EXPECT_EQ(a.output_dir, b.output_dir);
  EXPECT_EQ(a.policy.chunk_elems, b.policy.chunk_elems);
  EXPECT_EQ(a.policy.prefetch_depth, b.policy.prefetch_depth);
  EXPECT_EQ(a.policy.param_route, b.policy.param_route);
  EXPECT_EQ(a.policy.grad_route, b.policy.grad_route);
  EXPECT_EQ(a.policy.activations, b.policy.activations);
  EXPECT_EQ(a.policy.loss_chunk_tokens, b.policy.loss_chunk_tokens);
  EXPECT_EQ(a.policy.mlp_tile_tokens, b.policy.mlp_tile_tokens);
  EXPECT_EQ(a.policy.kept_blocks, b.policy.kept_blocks);
  EXPECT_EQ(a.policy.resident_units, b.policy.resident_units);
  EXPECT_EQ(a.policy.update_threads, b.policy.update_threads);
  EXPECT_EQ(a.log_every, b.log_every);
}

// Every field differs from its default.
constexpr char kFullYaml[] = R"(# a full job
model: qwen2.5-0.5b
data:
  format: tokens
  path: /data/corpus.bin
  token_dtype: uint32
  shuffle: false
seq_len: 2048
micro_batch_size: 2
grad_accum: 8
workers: 4
device: cuda
compute_dtype: bf16
steps: 1000
optimizer:
  lr: 2.0e-5
  min_lr_ratio: 0.05
  warmup_steps: 50
  schedule: linear
  beta1: 0.85
  beta2: 0.999
  eps: 1.0e-6
  weight_decay: 0.1
  max_grad_norm: 0.5
seed: 18446744073709551615
checkpoint_dir: /ckpt
checkpoint_interval: 200
keep_checkpoints: 5
output_dir: /out
policy:
  chunk_elems: 1048576
  prefetch_depth: 2
  param_route: scatter_allgather
  grad_route: reduce_scatter
  activations: host
  loss_chunk_tokens: 512
  mlp_tile_tokens: 2048
  kept_blocks: 4
  resident_units: 3
  update_threads: 6
log_every: 10
)";

// What the model computes in: bf16 on cuda whatever compute_dtype says; on the CPU
// device, compute_dtype.
TEST(TrainConfigTest, ComputedInIsBf16OnCudaAndAsAskedOnTheCpu) {
  TrainConfig c;
  for (ComputeDtype d : {ComputeDtype::kFp32, ComputeDtype::kBf16}) {
    c.compute_dtype = d;
    c.device = DeviceKind::kCuda;
    EXPECT_EQ(c.computed_in(), ComputeDtype::kBf16);
    c.device = DeviceKind::kCpu;
    EXPECT_EQ(c.computed_in(), d);
  }
}

TEST(TrainConfigTest, ParsesFullYaml) {
  absl::StatusOr<TrainConfig> c = ParseTrainConfig(kFullYaml, "full.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "qwen2.5-0.5b");
  EXPECT_EQ(c->data.format, DataFormat::kTokens);
  EXPECT_EQ(c->data.path, "/data/corpus.bin");
  EXPECT_EQ(c->data.token_dtype, TokenDtype::kUint32);
  EXPECT_FALSE(c->data.shuffle);
  EXPECT_EQ(c->seq_len, 2048);
  EXPECT_EQ(c->micro_batch_size, 2);
  EXPECT_EQ(c->grad_accum, 8);
  EXPECT_EQ(c->workers, 4);
  EXPECT_EQ(c->device, DeviceKind::kCuda);
  EXPECT_EQ(c->compute_dtype, ComputeDtype::kBf16);
  EXPECT_EQ(c->steps, 1000);
  EXPECT_DOUBLE_EQ(c->optimizer.lr, 2e-5);
  EXPECT_DOUBLE_EQ(c->optimizer.min_lr_ratio, 0.05);
  EXPECT_EQ(c->optimizer.warmup_steps, 50);
  EXPECT_EQ(c->optimizer.schedule, LrScheduleKind::kLinear);
  EXPECT_DOUBLE_EQ(c->optimizer.beta1, 0.85);
  EXPECT_DOUBLE_EQ(c->optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c->optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c->optimizer.max_grad_norm, 0.5);
  EXPECT_EQ(c->seed, 18446744073709551615ull);
  EXPECT_EQ(c->checkpoint_dir, "/ckpt");
  EXPECT_EQ(c->checkpoint_interval, 200);
  EXPECT_EQ(c->keep_checkpoints, 5);
  EXPECT_EQ(c->output_dir, "/out");
  EXPECT_EQ(c->policy.chunk_elems, 1048576);
  EXPECT_EQ(c->policy.prefetch_depth, 2);
  EXPECT_EQ(c->policy.param_route, ParamRoute::kScatterAllGather);
  EXPECT_EQ(c->policy.grad_route, GradRoute::kReduceScatter);
  EXPECT_EQ(c->policy.activations, ActivationPlacement::kHost);
  EXPECT_EQ(c->policy.loss_chunk_tokens, 512);
  EXPECT_EQ(c->policy.mlp_tile_tokens, 2048);
  EXPECT_EQ(c->policy.kept_blocks, 4);
  EXPECT_EQ(c->policy.resident_units, 3);
  EXPECT_EQ(c->policy.update_threads, 6);
  EXPECT_EQ(c->log_every, 10);
  EXPECT_EQ(c->tokens_per_step(), 2 * 8 * 4 * 2048);
}

TEST(TrainConfigTest, JsonRoundTripKeepsEveryField) {
  absl::StatusOr<TrainConfig> full = ParseTrainConfig(kFullYaml, "full.yaml");
  ASSERT_TRUE(full.ok()) << full.status();
  full->output_dir = "/out/with \"quotes\", a tab\t, ümlaut and a\nnewline";
  full->optimizer.lr = 0.1 + 0.2;  // not a short decimal
  const std::string json = TrainConfigToJson(*full);
  absl::StatusOr<TrainConfig> back = ParseTrainConfig(json, "roundtrip.json");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  ExpectSameConfig(*full, *back);
  EXPECT_EQ(TrainConfigToJson(*back), json);
  // Defaults too.
  absl::StatusOr<TrainConfig> defaults =
      ParseTrainConfig(TrainConfigToJson(TrainConfig{}), "d.json");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  ExpectSameConfig(*defaults, TrainConfig{});
}

// A string may hold brackets up to the reader's count (every '[' and '{' counts, quoted
// or not): what the reader took, the writer gives back in a form the reader takes again,
// brackets in strings as \u escapes (a fuzzer found 62 in a model name: its JSON, with
// the sections' own braces, was refused as nested deeper than 64).
TEST(TrainConfigTest, JsonOfBracketsInStringsParsesBack) {
  const std::string name = "/models/" + std::string(31, '{') + std::string(31, '[') + "}]";
  absl::StatusOr<TrainConfig> c = ParseTrainConfig("model: '" + name + "'\n", "brackets.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->model, name);
  const std::string json = TrainConfigToJson(*c);
  EXPECT_EQ(json.find("{{"), std::string::npos) << json;
  absl::StatusOr<TrainConfig> back = ParseTrainConfig(json, "brackets.json");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  EXPECT_EQ(back->model, name);
  EXPECT_EQ(TrainConfigToJson(*back), json);
  // The reader's bound still holds for brackets the writer did not escape.
  EXPECT_FALSE(ParseTrainConfig("model: '" + std::string(65, '[') + "'\n", "deep.yaml").ok());
}

// The text-format fields, every one differing from its default.
constexpr char kChatYaml[] = R"(model: /models/qwen3
data:
  format: chat
  path: /data/chat.jsonl
  tokenizer: /models/qwen3/tokenizer.json
  cache_dir: /cache
  skip_bad_lines: true
  document_mask: true
  eval_path: /data/chat-eval.jsonl
eval_interval: 50
eval_batches: 3
)";

TEST(TrainConfigTest, ParsesTextDataFieldsAndRoundTripsThem) {
  absl::StatusOr<TrainConfig> c = ParseTrainConfig(kChatYaml, "chat.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.format, DataFormat::kChat);
  EXPECT_EQ(c->data.tokenizer, "/models/qwen3/tokenizer.json");
  EXPECT_EQ(c->data.cache_dir, "/cache");
  EXPECT_TRUE(c->data.skip_bad_lines);
  EXPECT_TRUE(c->data.document_mask);
  EXPECT_EQ(c->data.eval_path, "/data/chat-eval.jsonl");
  EXPECT_EQ(c->eval_interval, 50);
  EXPECT_EQ(c->eval_batches, 3);
  absl::StatusOr<TrainConfig> back = ParseTrainConfig(TrainConfigToJson(*c), "back.json");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameConfig(*c, *back);
  const TrainConfig defaults;
  EXPECT_FALSE(defaults.data.document_mask);
  EXPECT_FALSE(defaults.data.skip_bad_lines);
  EXPECT_EQ(defaults.eval_interval, 0);
  EXPECT_EQ(defaults.eval_batches, 8);
  for (const char* format : {"text", "prompt_completion", "jsonl"}) {
    EXPECT_TRUE(ParseTrainConfig(std::string("data: {format: ") + format + ", path: /d}\n", "f.yaml").ok())
        << format;
  }
}

TEST(TrainConfigTest, JsonNamesEveryFieldWithNestedSections) {
  const std::string json = TrainConfigToJson(TrainConfig{});
  for (const char* key :
       {"\"model\"", "\"data\"", "\"format\"", "\"shuffle\"", "\"optimizer\"", "\"max_grad_norm\"",
        "\"tokenizer\"", "\"cache_dir\"", "\"skip_bad_lines\"", "\"document_mask\"", "\"eval_path\"",
        "\"eval_interval\"", "\"eval_batches\"",
        "\"policy\"", "\"update_threads\"", "\"seed\"", "\"log_every\"", "\"keep_checkpoints\""}) {
    EXPECT_CONTAINS(json, key);
  }
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TrainConfigTest, LoadsJsonFile) {
  const std::string path = WriteTemp("job.json", R"({
  "model": "tiny",
  "data": {"format": "jsonl", "path": "/d/train.jsonl"},
  "steps": 20,
  "workers": 2,
  "optimizer": {"lr": 1e-3, "schedule": "constant", "warmup_steps": 0},
  "policy": {"grad_route": "reduce_one"}
})");
  absl::StatusOr<TrainConfig> c = LoadTrainConfig(path);
  std::remove(path.c_str());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.format, DataFormat::kJsonl);
  EXPECT_EQ(c->data.path, "/d/train.jsonl");
  EXPECT_EQ(c->steps, 20);
  EXPECT_EQ(c->workers, 2);
  EXPECT_DOUBLE_EQ(c->optimizer.lr, 1e-3);
  EXPECT_EQ(c->optimizer.schedule, LrScheduleKind::kConstant);
  EXPECT_EQ(c->policy.grad_route, GradRoute::kReduceOne);
  EXPECT_EQ(c->seq_len, TrainConfig{}.seq_len);  // absent: default
}

TEST(TrainConfigTest, EmptyDocumentsGiveDefaults) {
  for (const char* text : {"", "# nothing\n", "{}", "---\n"}) {
    absl::StatusOr<TrainConfig> c = ParseTrainConfig(text, "empty.yaml");
    ASSERT_TRUE(c.ok()) << "'" << text << "': " << c.status();
    ExpectSameConfig(*c, TrainConfig{});
  }
  EXPECT_TRUE(ValidateTrainConfig(TrainConfig{}).ok());
  absl::StatusOr<TrainConfig> c = ParseTrainConfig("optimizer:\nsteps: 3\n", "s.yaml");
  ASSERT_TRUE(c.ok()) << c.status();  // an empty section keeps its defaults
  EXPECT_EQ(c->steps, 3);
}

TEST(TrainConfigTest, MissingFileIsNotFound) {
  absl::StatusOr<TrainConfig> c = LoadTrainConfig("/nonexistent/dir/job.yaml");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_CONTAINS(std::string(c.status().message()), "/nonexistent/dir/job.yaml");
}

// The message of a config that must fail.
std::string ErrorOf(const std::string& text, const std::string& source = "job.yaml") {
  absl::StatusOr<TrainConfig> c = ParseTrainConfig(text, source);
  EXPECT_FALSE(c.ok()) << "accepted:\n" << text;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

TEST(TrainConfigErrorTest, UnknownFieldNamesFileLineAndSuggestion) {
  const std::string e = ErrorOf("steps: 10\noptimizer:\n  lr: 1.0e-4\n  lrr: 3\n", "cfg.yaml");
  EXPECT_CONTAINS(e, "unknown field 'optimizer.lrr' in cfg.yaml");
  EXPECT_CONTAINS(e, "line 4");
  EXPECT_CONTAINS(e, "did you mean 'optimizer.lr'?");
  // A field in the wrong section points at the right one.
  EXPECT_CONTAINS(ErrorOf("lr: 0.1\n"), "did you mean 'optimizer.lr'?");
  EXPECT_CONTAINS(ErrorOf("data:\n  formt: tokens\n"), "did you mean 'data.format'?");
  // Nothing close: no suggestion.
  const std::string far = ErrorOf("zzzzzzzzzzzz: 1\n");
  EXPECT_CONTAINS(far, "unknown field 'zzzzzzzzzzzz'");
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

TEST(TrainConfigErrorTest, WrongTypesNameFieldAndLine) {
  std::string e = ErrorOf("model: tiny\noptimizer:\n  lr: fast\n");
  EXPECT_CONTAINS(e, "'optimizer.lr'");
  EXPECT_CONTAINS(e, "line 3");
  EXPECT_CONTAINS(e, "must be a number");
  e = ErrorOf("{\n  \"steps\": \"100\"\n}", "job.json");  // a JSON string where a number belongs
  EXPECT_CONTAINS(e, "'steps' in job.json at line 2");
  EXPECT_CONTAINS(e, "the string \"100\"");
  e = ErrorOf("seq_len: 1.5\n");
  EXPECT_CONTAINS(e, "'seq_len'");
  EXPECT_CONTAINS(e, "must be an integer");
  e = ErrorOf("\n\nseed: -1\n");
  EXPECT_CONTAINS(e, "'seed' in job.yaml at line 3 must be non-negative");
  e = ErrorOf("workers: 99999999999\n");
  EXPECT_CONTAINS(e, "'workers'");
  EXPECT_CONTAINS(e, "out of range");
  e = ErrorOf("data:\n  shuffle: maybe\n");
  EXPECT_CONTAINS(e, "'data.shuffle' in job.yaml at line 2 must be true or false");
  e = ErrorOf("model: [a, b]\n");
  EXPECT_CONTAINS(e, "'model'");
  EXPECT_CONTAINS(e, "must be a string, got a list");
  e = ErrorOf("optimizer: 3\n");
  EXPECT_CONTAINS(e, "'optimizer' in job.yaml at line 1 must be a map");
  e = ErrorOf("steps:\n");
  EXPECT_CONTAINS(e, "'steps'");
  EXPECT_CONTAINS(e, "null");
}

TEST(TrainConfigErrorTest, NegativeWhereNotAllowedNamesFieldAndLine) {
  std::string e = ErrorOf("model: tiny\nsteps: -5\n");
  EXPECT_CONTAINS(e, "'steps' in job.yaml at line 2 must be >= 1, got -5");
  e = ErrorOf("optimizer:\n  warmup_steps: -1\n");
  EXPECT_CONTAINS(e, "'optimizer.warmup_steps' in job.yaml at line 2");
}

TEST(TrainConfigErrorTest, SyntaxDuplicatesAndTopLevel) {
  std::string e = ErrorOf("model: tiny\ndata: {format: tokens\n");
  EXPECT_CONTAINS(e, "job.yaml at line");
  EXPECT_CONTAINS(e, "not valid YAML or JSON");
  e = ErrorOf("steps: 1\nmodel: a\nsteps: 2\n");
  EXPECT_CONTAINS(e, "duplicate field 'steps' in job.yaml at line 3 (first at line 1)");
  e = ErrorOf("- 1\n- 2\n");
  EXPECT_CONTAINS(e, "top level must be a map");
}

// One invalid value per rule; the message must name the field.
TEST(TrainConfigErrorTest, EveryValidationRuleNamesItsField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model: ''", "model"},
      {"seq_len: 0", "seq_len"},
      {"seq_len: 1048577", "seq_len"},
      {"micro_batch_size: 0", "micro_batch_size"},
      {"grad_accum: 0", "grad_accum"},
      {"workers: 0", "workers"},
      {"workers: 65", "workers"},
      {"micro_batch_size: 1099511627776", "micro_batch_size"},
      {"steps: 0", "steps"},
      {"device: tpu", "device"},
      {"compute_dtype: fp16", "compute_dtype"},
      {"optimizer: {schedule: step}", "optimizer.schedule"},
      {"optimizer: {beta1: 1.0}", "optimizer.beta1"},
      {"optimizer: {beta1: -0.1}", "optimizer.beta1"},
      {"optimizer: {beta2: 1}", "optimizer.beta2"},
      {"optimizer: {beta2: nan}", "optimizer.beta2"},
      {"optimizer: {eps: 0}", "optimizer.eps"},
      {"optimizer: {lr: 0}", "optimizer.lr"},
      {"optimizer: {lr: inf}", "optimizer.lr"},
      {"optimizer: {lr: nan}", "optimizer.lr"},
      {"optimizer: {weight_decay: -0.01}", "optimizer.weight_decay"},
      {"optimizer: {max_grad_norm: -1}", "optimizer.max_grad_norm"},
      {"optimizer: {warmup_steps: -1}", "optimizer.warmup_steps"},
      {"optimizer: {min_lr_ratio: 1.5}", "optimizer.min_lr_ratio"},
      {"optimizer: {min_lr_ratio: -0.1}", "optimizer.min_lr_ratio"},
      {"data: {format: csv}", "data.format"},
      {"data: {format: tokens}", "data.path"},
      {"data: {format: jsonl}", "data.path"},
      {"data: {path: /x.bin}", "data.path"},
      {"data: {token_dtype: int8}", "data.token_dtype"},
      {"policy: {param_route: broadcast}", "policy.param_route"},
      {"policy: {grad_route: allreduce}", "policy.grad_route"},
      {"policy: {activations: disk}", "policy.activations"},
      {"checkpoint_interval: -1", "checkpoint_interval"},
      {"checkpoint_interval: 10", "checkpoint_dir"},
      {"keep_checkpoints: 0", "keep_checkpoints"},
      {"policy: {chunk_elems: -1}", "policy.chunk_elems"},
      {"policy: {prefetch_depth: 0}", "policy.prefetch_depth"},
      {"policy: {prefetch_depth: 9}", "policy.prefetch_depth"},
      {"policy: {loss_chunk_tokens: 0}", "policy.loss_chunk_tokens"},
      {"policy: {mlp_tile_tokens: -1}", "policy.mlp_tile_tokens"},
      {"policy: {kept_blocks: -2}", "policy.kept_blocks"},
      {"policy: {resident_units: -2}", "policy.resident_units"},
      {"policy: {update_threads: -1}", "policy.update_threads"},
      {"log_every: 0", "log_every"},
      {"data: {format: tokens, path: /t, tokenizer: /tok.json}", "data.tokenizer"},
      {"data: {format: jsonl, path: /t, cache_dir: /c}", "data.cache_dir"},
      {"data: {format: tokens, path: /t, skip_bad_lines: true}", "data.skip_bad_lines"},
      {"data: {format: tokens, path: /t, document_mask: true}", "data.document_mask"},
      {"data: {document_mask: true}", "data.document_mask"},
      {"data: {eval_path: /e}", "data.eval_path"},
      {"data: {format: text}", "data.path"},
      {"eval_interval: -1", "eval_interval"},
      {"eval_interval: 10", "eval_interval"},
      {"eval_batches: 0", "eval_batches"},
      {"hosts: {count: 0}", "hosts.count"},
      {"hosts: {count: 2, rank: 2, address: h0}", "hosts.rank"},
      {"hosts: {count: 2}", "hosts.address"},
      {"hosts: {port: 70000}", "hosts.port"},
      {"hosts: {timeout_seconds: 0}", "hosts.timeout_seconds"},
      {"hosts: {timeout_seconds: 1.0e300}", "hosts.timeout_seconds"},
      // Resident units over several hosts keep fp32 moments (hosts_test.cc trains them).
      {"hosts: {count: 2, address: h0}\npolicy: {resident_units: 2}\noptimizer: {state_dtype: int8}",
       "policy.resident_units"},
  };
  for (const auto& [text, field] : cases) {
    SCOPED_TRACE(text);
    EXPECT_CONTAINS(ErrorOf(text + "\n"), "field '" + field + "'");
  }
}

// Issue 22: the moment dtype is one of three names, and int8 moments update whole blocks.
TEST(TrainConfigErrorTest, StateDtypeIsCheckedWithItsBlocks) {
  EXPECT_CONTAINS(ErrorOf("optimizer: {state_dtype: fp8}\n"), "field 'optimizer.state_dtype'");
  EXPECT_CONTAINS(ErrorOf("optimizer: {state_dtype: int8}\npolicy: {chunk_elems: 1000}\n"),
                  "field 'policy.chunk_elems'");
  for (const char* ok : {"optimizer: {state_dtype: int8}\npolicy: {chunk_elems: 1024}\n",
                         "optimizer: {state_dtype: bf16}\npolicy: {chunk_elems: 1000}\n"}) {
    absl::StatusOr<TrainConfig> c = ParseTrainConfig(ok, "job.yaml");
    ASSERT_TRUE(c.ok()) << c.status();
  }
  EXPECT_EQ(TrainConfig().optimizer.state_dtype, MomentDtype::kFp32);
}

// Issue 21 and 22: units resident on a GPU keep the job's moments (fp32, bf16 or int8) on
// one host; over several hosts their replicas keep fp32 moments (auto and none go with any).
TEST(TrainConfigErrorTest, ResidentUnitsWithCompactMomentsStayOnOneHost) {
  for (const char* dtype : {"int8", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string error = ErrorOf(absl::StrCat("optimizer: {state_dtype: ", dtype,
                                                   "}\npolicy: {resident_units: 2}\nhosts: {count: 2, address: h0}\n"));
    EXPECT_CONTAINS(error, "field 'policy.resident_units'");
    EXPECT_CONTAINS(error, "keep fp32 moments, got 2");
  }
  for (const char* ok : {"optimizer: {state_dtype: int8}\npolicy: {resident_units: 2}\n",
                         "optimizer: {state_dtype: bf16}\npolicy: {resident_units: 2}\n",
                         "optimizer: {state_dtype: int8}\npolicy: {resident_units: -1}\nhosts: {count: 2, address: h0}\n",
                         "optimizer: {state_dtype: int8}\npolicy: {resident_units: 0}\n",
                         "optimizer: {state_dtype: fp32}\npolicy: {resident_units: 2}\nhosts: {count: 2, address: h0}\n"}) {
    absl::StatusOr<TrainConfig> c = ParseTrainConfig(ok, "job.yaml");
    ASSERT_TRUE(c.ok()) << ok << c.status();
  }
  EXPECT_EQ(TrainConfig().policy.resident_units, -1);
}

TEST(TrainConfigErrorTest, ValidateNamesTheField) {
  TrainConfig c;
  c.optimizer.lr = -1;
  absl::Status s = ValidateTrainConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(std::string(s.message()), "field 'optimizer.lr' must be > 0 and finite, got -1");
  c = TrainConfig{};
  c.policy.grad_route = static_cast<GradRoute>(7);  // no such route
  EXPECT_CONTAINS(
      std::string(ValidateTrainConfig(c).message()),
      "field 'policy.grad_route' must be one of gather_host, reduce_scatter, reduce_one");
  c = TrainConfig{};
  c.data.format = DataFormat::kTokens;
  c.data.path = "/x.bin";
  EXPECT_TRUE(ValidateTrainConfig(c).ok());
}

}  // namespace
}  // namespace slidedp
