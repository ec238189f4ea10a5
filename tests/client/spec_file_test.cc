// Job spec files: YAML and JSON, unknown fields and wrong types named with the line,
// exact 64-bit values, strings that look like numbers, the shipped example.
#include "client/spec_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <future>
#include <string>

#include "tests/server/test_util.h"

namespace slidedp::client {
namespace {

TEST(SpecFileTest, ParsesYamlWithNestedFields) {
  auto spec = ParseJobSpec(
      "model: tiny\nseq_len: 64\ndata:\n  format: synthetic\n  shuffle: no\n"
      "optimizer:\n  lr: 1.0e-3\n  max_grad_norm: 0\npolicy:\n  prefetch_depth: 2\n",
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model(), "tiny");
  EXPECT_EQ(spec->seq_len(), 64);
  EXPECT_TRUE(spec->data().has_shuffle());
  EXPECT_FALSE(spec->data().shuffle());
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 1e-3);
  EXPECT_TRUE(spec->optimizer().has_max_grad_norm());
  EXPECT_EQ(spec->optimizer().max_grad_norm(), 0.0);
  EXPECT_FALSE(spec->has_steps()) << "unset stays unset, so the daemon applies the default";
  EXPECT_EQ(spec->policy().prefetch_depth(), 2);
}

TEST(SpecFileTest, ParsesJson) {
  auto spec = ParseJobSpec(R"({"model": "small", "steps": 5, "optimizer": {"schedule": "linear"}})", "j.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model(), "small");
  EXPECT_EQ(spec->steps(), 5);
  EXPECT_EQ(spec->optimizer().schedule(), "linear");
}

TEST(SpecFileTest, UnknownFieldsAreErrorsNamingFieldAndLine) {
  auto top = ParseJobSpec("model: tiny\nstepz: 4\n", "job.yaml");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(top.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(top.status().message().find("job.yaml:2"), absl::string_view::npos) << top.status();
  EXPECT_NE(top.status().message().find("stepz"), absl::string_view::npos) << top.status();
  auto nested = ParseJobSpec("optimizer:\n  lr: 1\n  lrr: 2\n", "job.yaml");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("optimizer.lrr"), absl::string_view::npos) << nested.status();
  EXPECT_NE(nested.status().message().find("unknown field"), absl::string_view::npos);
}

TEST(SpecFileTest, WrongTypesAreErrorsNamingTheField) {
  auto text_for_int = ParseJobSpec("seq_len: lots\n", "job.yaml");
  ASSERT_FALSE(text_for_int.ok());
  EXPECT_NE(text_for_int.status().message().find("seq_len"), absl::string_view::npos) << text_for_int.status();
  auto fraction = ParseJobSpec("steps: 1.5\n", "job.yaml");
  EXPECT_FALSE(fraction.ok());
  auto bad_bool = ParseJobSpec("data:\n  shuffle: maybe\n", "job.yaml");
  ASSERT_FALSE(bad_bool.ok());
  EXPECT_NE(bad_bool.status().message().find("data.shuffle"), absl::string_view::npos) << bad_bool.status();
  auto map_for_scalar = ParseJobSpec("model:\n  a: 1\n", "job.yaml");
  EXPECT_FALSE(map_for_scalar.ok());
  auto scalar_for_map = ParseJobSpec("optimizer: 3\n", "job.yaml");
  ASSERT_FALSE(scalar_for_map.ok());
  EXPECT_NE(scalar_for_map.status().message().find("optimizer"), absl::string_view::npos);
  auto overflow = ParseJobSpec("workers: 99999999999\n", "job.yaml");
  EXPECT_FALSE(overflow.ok());
}

TEST(SpecFileTest, KeepsStringsAndSixtyFourBitValuesExact) {
  auto spec = ParseJobSpec("model: 123\nseed: 18446744073709551615\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model(), "123");
  EXPECT_EQ(spec->seed(), 18446744073709551615ull);
}

TEST(SpecFileTest, MalformedYamlAndNonMappingsAreErrors) {
  EXPECT_FALSE(ParseJobSpec("model: [unclosed\n", "job.yaml").ok());
  EXPECT_FALSE(ParseJobSpec("- a\n- b\n", "job.yaml").ok());
  auto empty = ParseJobSpec("", "job.yaml");
  EXPECT_TRUE(empty.ok()) << "an empty file means every default";
  EXPECT_EQ(LoadJobSpec("/nonexistent/job.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST(SpecFileTest, TheShippedTinyExampleParses) {
  auto spec = LoadJobSpec(std::string(SLIDEDP_SOURCE_DIR) + "/client/examples/tiny.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model(), "tiny");
  EXPECT_EQ(spec->data().format(), "synthetic");
  EXPECT_GT(spec->steps(), 0);
}

// Issue 18: nesting that would exhaust yaml-cpp's stack, a file that never ends, long
// names echoed in full.
TEST(SpecFileTest, DeeplyNestedSpecsAreRefusedNamingTheLine) {
  for (const std::string& text :
       {"model: tiny\ndata: " + std::string(200000, '[') + std::string(200000, ']') + "\n",
        std::string(200000, '{') + std::string(200000, '}'),
        "model: tiny\ndata:\n" + [] { std::string b; for (int i = 0; i < 100000; ++i) b += "- "; return b; }() + "x\n"}) {
    auto spec = ParseJobSpec(text, "job.yaml");
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find("job.yaml:"), absl::string_view::npos) << spec.status();
    EXPECT_NE(spec.status().message().find("nested deeper than"), absl::string_view::npos) << spec.status();
  }
  EXPECT_FALSE(ParseJobSpec(std::string(2 << 20, '#'), "job.yaml").ok()) << "over the job file limit";
}

TEST(SpecFileTest, LongNamesAndValuesAreEchoedShort) {
  const std::string name(4096, 'f');
  // (YAML allows plain keys of 1024 characters at most; longer ones are explicit "? KEY".)
  for (const std::string& text : {"? " + name + "\n: 1\n", "data:\n  ? " + name + "\n  : 1\n",
                                  "data:\n  shuffle: " + name + "\n", "steps: " + name + "\n"}) {
    auto spec = ParseJobSpec(text, "job.yaml");
    ASSERT_FALSE(spec.ok());
    EXPECT_NE(spec.status().message().find("job.yaml:"), absl::string_view::npos) << spec.status();
    EXPECT_LT(spec.status().message().size(), 1024u) << spec.status().message().substr(0, 2000);
  }
  auto spec = ParseJobSpec("x: 1\n", "/" + name + "/job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_LT(spec.status().message().size(), 1024u);
}

TEST(SpecFileTest, AFifoOrADirectoryIsRefusedNotWaitedOn) {
  slidedp::server::testing::TempDir dir;
  const std::string fifo = dir.Join("job.yaml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::future<absl::Status> result =
      std::async(std::launch::async, [&] { return LoadJobSpec(fifo).status(); });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "LoadJobSpec blocked on a FIFO";
    slidedp::server::testing::WriteFile(fifo, "");  // a writer releases it
  }
  absl::Status s = result.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("FIFO"), absl::string_view::npos) << s;
  EXPECT_EQ(LoadJobSpec(dir.Join("")).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slidedp::client
