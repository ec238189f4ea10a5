// JobSpec <-> TrainConfig: defaults for unset fields, explicit zeros kept, validation
// errors naming the field, unknown fields, path checks.
#include "server/spec_translation.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "client/spec_file.h"
#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

using testing::TempDir;

PathPolicy NoPaths() { return *PathPolicy::Create(PathRoots{}); }

TEST(SpecTranslationTest, UnsetFieldsTakeTheTrainConfigDefaults) {
  const TrainConfig defaults;
  const TrainConfig c = JobSpecToTrainConfigUnchecked(v1::JobSpec());
  EXPECT_EQ(c.model, defaults.model);
  EXPECT_EQ(c.seq_len, defaults.seq_len);
  EXPECT_EQ(c.steps, defaults.steps);
  EXPECT_EQ(c.seed, defaults.seed);
  EXPECT_EQ(c.data.shuffle, defaults.data.shuffle);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, defaults.optimizer.lr);
  EXPECT_DOUBLE_EQ(c.optimizer.max_grad_norm, defaults.optimizer.max_grad_norm);
  EXPECT_EQ(c.policy.prefetch_depth, defaults.policy.prefetch_depth);
  EXPECT_EQ(c.policy.loss_chunk_tokens, defaults.policy.loss_chunk_tokens);
}

TEST(SpecTranslationTest, ExplicitZerosAndFalseAreKept) {
  v1::JobSpec spec;
  spec.mutable_optimizer()->set_max_grad_norm(0);
  spec.mutable_optimizer()->set_beta1(0);
  spec.mutable_data()->set_shuffle(false);
  spec.set_seed(0);
  const TrainConfig c = JobSpecToTrainConfigUnchecked(spec);
  EXPECT_EQ(c.optimizer.max_grad_norm, 0.0);
  EXPECT_EQ(c.optimizer.beta1, 0.0);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.seed, 0u);
}

TEST(SpecTranslationTest, RoundTripKeepsEveryField) {
  TrainConfig c;
  c.model = "small";
  c.seq_len = 77;
  c.micro_batch_size = 3;
  c.grad_accum = 5;
  c.workers = 2;
  c.device = DeviceKind::kCuda;
  c.compute_dtype = ComputeDtype::kBf16;
  c.steps = 9;
  c.seed = 18446744073709551615ull;
  c.optimizer.lr = 1.25e-5;
  c.optimizer.schedule = LrScheduleKind::kLinear;
  c.optimizer.warmup_steps = 4;
  c.policy.chunk_elems = 1 << 20;
  c.policy.grad_route = GradRoute::kReduceScatter;
  c.checkpoint_interval = 3;
  c.keep_checkpoints = 2;
  c.log_every = 7;
  c.data.format = DataFormat::kChat;
  c.data.path = "/data/chat.jsonl";
  c.data.tokenizer = "/models/q/tokenizer.json";
  c.data.cache_dir = "/out/cache";
  c.data.skip_bad_lines = true;
  c.data.document_mask = true;
  c.data.eval_path = "/data/eval.jsonl";
  c.eval_interval = 11;
  c.eval_batches = 2;
  const TrainConfig back = JobSpecToTrainConfigUnchecked(TrainConfigToJobSpec(c));
  EXPECT_EQ(TrainConfigToJson(back), TrainConfigToJson(c));
}

TEST(SpecTranslationTest, InvalidValuesAreInvalidArgumentNamingTheField) {
  const PathPolicy paths = NoPaths();
  struct Case {
    const char* field;
    std::function<void(v1::JobSpec&)> set;
  } cases[] = {
      {"seq_len", [](v1::JobSpec& s) { s.set_seq_len(-1); }},
      {"micro_batch_size", [](v1::JobSpec& s) { s.set_micro_batch_size(0); }},
      {"steps", [](v1::JobSpec& s) { s.set_steps(-5); }},
      {"optimizer.lr", [](v1::JobSpec& s) { s.mutable_optimizer()->set_lr(-1); }},
      {"policy.grad_route", [](v1::JobSpec& s) { s.mutable_policy()->set_grad_route("teleport"); }},
      {"device", [](v1::JobSpec& s) { s.set_device("tpu"); }},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec;
    c.set(spec);
    absl::StatusOr<TrainConfig> result = JobSpecToTrainConfig(spec, paths);
    ASSERT_FALSE(result.ok()) << c.field;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(result.status().message().find(c.field), absl::string_view::npos) << result.status();
  }
}

TEST(SpecTranslationTest, UnknownPresetListsThePresets) {
  v1::JobSpec spec;
  spec.set_model("gpt-17");
  absl::StatusOr<TrainConfig> result = JobSpecToTrainConfig(spec, NoPaths());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("tiny"), absl::string_view::npos) << result.status();
}

TEST(SpecTranslationTest, UnknownFieldsAndHugeStringsAreRefused) {
  v1::JobSpec spec;
  spec.mutable_optimizer()->GetReflection()->MutableUnknownFields(spec.mutable_optimizer())->AddVarint(99, 1);
  absl::Status s = CheckSpecWellFormed(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("optimizer"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("99"), absl::string_view::npos) << s;

  v1::JobSpec huge;
  huge.mutable_data()->set_token_dtype(std::string(1 << 20, 'x'));
  s = JobSpecToTrainConfig(huge, NoPaths()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data.token_dtype"), absl::string_view::npos) << s;
}

TEST(SpecTranslationTest, PathsAreCheckedAndMadeCanonical) {
  TempDir dir;
  std::filesystem::create_directories(dir.Join("data"));
  std::filesystem::create_directories(dir.Join("out"));
  testing::WriteFile(dir.Join("data/t.bin"), std::string(64, '\0'));
  auto paths = PathPolicy::Create(PathRoots{{}, {dir.Join("data")}, {dir.Join("out")}});
  ASSERT_TRUE(paths.ok());
  v1::JobSpec spec;
  spec.mutable_data()->set_format("tokens");
  spec.mutable_data()->set_path(dir.Join("data/../data/t.bin"));
  spec.set_output_dir(dir.Join("out/run"));
  absl::StatusOr<TrainConfig> c = JobSpecToTrainConfig(spec, *paths);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.path, std::filesystem::canonical(dir.Join("data/t.bin")).string());
  spec.set_checkpoint_dir(dir.Join("data/ckpt"));
  EXPECT_EQ(JobSpecToTrainConfig(spec, *paths).status().code(), absl::StatusCode::kPermissionDenied);
  spec.clear_checkpoint_dir();
  spec.set_model(dir.Join("out"));
  absl::Status model = JobSpecToTrainConfig(spec, *paths).status();
  EXPECT_EQ(model.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(model.message().find("--model_roots"), absl::string_view::npos) << model;
}

// Issue 18: a symlink under a root may resolve to a name that is not UTF-8; the job's
// spec shows canonical paths as proto3 strings, so such a path is refused, named.
TEST(SpecTranslationTest, PathsThatResolveToNonUtf8NamesAreRefused) {
  TempDir dir;
  std::filesystem::create_directories(dir.Join("data"));
  testing::WriteFile(dir.Join("data/\xff\xfe.bin"), std::string(64, '\0'));
  std::filesystem::create_symlink(dir.Join("data/\xff\xfe.bin"), dir.Join("data/link.bin"));
  auto paths = PathPolicy::Create(PathRoots{{}, {dir.Join("data")}, {}});
  ASSERT_TRUE(paths.ok());
  v1::JobSpec spec;
  spec.mutable_data()->set_format("tokens");
  spec.mutable_data()->set_path(dir.Join("data/link.bin"));
  absl::Status s = JobSpecToTrainConfig(spec, *paths).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("data.path: resolves to"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("\\xFF\\xFE.bin"), absl::string_view::npos) << s;
}

TEST(SpecTranslationTest, TextDataPathsAreCheckedAgainstTheirRoots) {
  TempDir dir;
  for (const char* sub : {"models/q", "data", "out"}) std::filesystem::create_directories(dir.Join(sub));
  testing::WriteFile(dir.Join("data/chat.jsonl"), "{}\n");
  testing::WriteFile(dir.Join("data/eval.jsonl"), "{}\n");
  testing::WriteFile(dir.Join("data/tokenizer.json"), "{}");
  testing::WriteFile(dir.Join("models/q/tokenizer.json"), "{}");
  auto paths = PathPolicy::Create(PathRoots{{dir.Join("models")}, {dir.Join("data")}, {dir.Join("out")}});
  ASSERT_TRUE(paths.ok());
  v1::JobSpec spec;
  v1::DataSpec* d = spec.mutable_data();
  d->set_format("chat");
  d->set_path(dir.Join("data/chat.jsonl"));
  d->set_tokenizer(dir.Join("models/q/../q"));
  d->set_eval_path(dir.Join("data/eval.jsonl"));
  d->set_cache_dir(dir.Join("out/cache"));
  spec.set_eval_interval(5);
  absl::StatusOr<TrainConfig> c = JobSpecToTrainConfig(spec, *paths);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.tokenizer, std::filesystem::canonical(dir.Join("models/q")).string());
  EXPECT_EQ(c->eval_interval, 5);
  d->set_tokenizer(dir.Join("data/tokenizer.json"));  // under the data roots: allowed too
  EXPECT_TRUE(JobSpecToTrainConfig(spec, *paths).ok());
  const auto refused = [&](const char* field) {
    absl::Status s = JobSpecToTrainConfig(spec, *paths).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find(field), absl::string_view::npos) << s;
  };
  d->set_tokenizer(dir.Join("out/tokenizer.json"));
  refused("data.tokenizer");
  d->set_tokenizer(dir.Join("models/q"));
  d->set_eval_path(dir.Join("models/q/tokenizer.json"));
  refused("data.eval_path");
  d->set_eval_path(dir.Join("data/eval.jsonl"));
  d->set_cache_dir(dir.Join("data/cache"));
  refused("data.cache_dir");
  d->set_cache_dir(dir.Join("out/cache"));
  d->set_eval_path(dir.Join("data/missing.jsonl"));
  EXPECT_EQ(JobSpecToTrainConfig(spec, *paths).status().code(), absl::StatusCode::kInvalidArgument);
}

// `slidedp submit FILE` and `slidedp-train FILE` must read a file the same way.
TEST(SpecTranslationTest, SpecFilesMeanTheSameAsForSlidedpTrain) {
  const std::string yaml =
      "model: small\nseq_len: 96\nsteps: 7\nseed: 99\ndata:\n  shuffle: false\n"
      "optimizer:\n  lr: 2.5e-4\n  max_grad_norm: 0\n  schedule: linear\n"
      "policy:\n  prefetch_depth: 2\n  grad_route: reduce_one\n";
  absl::StatusOr<TrainConfig> train = ParseTrainConfig(yaml, "job.yaml");
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<v1::JobSpec> spec = client::ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(TrainConfigToJson(JobSpecToTrainConfigUnchecked(*spec)), TrainConfigToJson(*train));
  const std::string chat =
      "data:\n  format: chat\n  path: /d/c.jsonl\n  tokenizer: /m/tokenizer.json\n"
      "  cache_dir: /o/cache\n  skip_bad_lines: true\n  document_mask: true\n"
      "  eval_path: /d/e.jsonl\neval_interval: 20\neval_batches: 4\n";
  train = ParseTrainConfig(chat, "chat.yaml");
  ASSERT_TRUE(train.ok()) << train.status();
  spec = client::ParseJobSpec(chat, "chat.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(TrainConfigToJson(JobSpecToTrainConfigUnchecked(*spec)), TrainConfigToJson(*train));
  const std::string example = testing::ReadFileOrEmpty(std::string(SLIDEDP_SOURCE_DIR) + "/client/examples/tiny.yaml");
  absl::StatusOr<TrainConfig> example_train = ParseTrainConfig(example, "tiny.yaml");
  ASSERT_TRUE(example_train.ok()) << example_train.status();
  absl::StatusOr<v1::JobSpec> example_spec = client::ParseJobSpec(example, "tiny.yaml");
  ASSERT_TRUE(example_spec.ok()) << example_spec.status();
  EXPECT_EQ(TrainConfigToJson(JobSpecToTrainConfigUnchecked(*example_spec)), TrainConfigToJson(*example_train));
}

}  // namespace
}  // namespace slidedp::server
