// PathPolicy: roots, "..", symlinks, relative and missing paths.
#include "server/path_policy.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class PathPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.Join("data/sub"));
    fs::create_directories(dir_.Join("secret"));
    fs::create_directories(dir_.Join("out"));
    testing::WriteFile(dir_.Join("data/sub/tokens.bin"), "x");
    testing::WriteFile(dir_.Join("secret/key"), "x");
    fs::create_symlink(dir_.Join("secret"), dir_.Join("data/escape"));
    fs::create_symlink(dir_.Join("data/sub"), dir_.Join("out/inward"));
    auto policy = PathPolicy::Create(
        PathRoots{{}, {dir_.Join("data")}, {dir_.Join("out")}});
    ASSERT_TRUE(policy.ok()) << policy.status();
    policy_ = std::make_unique<PathPolicy>(*std::move(policy));
  }
  TempDir dir_;
  std::unique_ptr<PathPolicy> policy_;
};

TEST_F(PathPolicyTest, AcceptsPathsUnderTheRootAndCanonicalizesThem) {
  auto ok = policy_->Check("data.path", dir_.Join("data/./sub/../sub/tokens.bin"), PathKind::kData, true);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, fs::canonical(dir_.Join("data/sub/tokens.bin")).string());
  auto out = policy_->Check("output_dir", dir_.Join("out/new/run1"), PathKind::kOutput, false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, fs::canonical(dir_.Join("out")).string() + "/new/run1");
}

TEST_F(PathPolicyTest, RefusesDotDotEscapes) {
  auto s = policy_->Check("data.path", dir_.Join("data/../secret/key"), PathKind::kData, true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.status().message().find("data.path"), absl::string_view::npos);
  EXPECT_NE(s.status().message().find("--data_roots"), absl::string_view::npos);
}

TEST_F(PathPolicyTest, RefusesSymlinkEscapes) {
  auto s = policy_->Check("data.path", dir_.Join("data/escape/key"), PathKind::kData, true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied) << s.status();
  EXPECT_NE(s.status().message().find("secret"), absl::string_view::npos) << s.status();
  // An output path through a symlink into a data root is outside the output roots.
  auto o = policy_->Check("output_dir", dir_.Join("out/inward/x"), PathKind::kOutput, false);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kPermissionDenied) << o.status();
}

TEST_F(PathPolicyTest, RootPrefixIsNotEnough) {
  fs::create_directories(dir_.Join("data2"));
  testing::WriteFile(dir_.Join("data2/f"), "x");
  auto s = policy_->Check("data.path", dir_.Join("data2/f"), PathKind::kData, true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(IsUnderRoot("/a/b", "/a"));
  EXPECT_TRUE(IsUnderRoot("/a", "/a"));
  EXPECT_FALSE(IsUnderRoot("/ab", "/a"));
  EXPECT_TRUE(IsUnderRoot("/x", "/"));
}

TEST_F(PathPolicyTest, RejectsRelativeEmptyMissingAndOverlongPaths) {
  EXPECT_EQ(policy_->Check("data.path", "data/x", PathKind::kData, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(policy_->Check("data.path", "", PathKind::kData, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto missing = policy_->Check("data.path", dir_.Join("data/none.bin"), PathKind::kData, true);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("does not exist"), absl::string_view::npos);
  // Missing and outside: the root check answers first (nothing revealed).
  EXPECT_EQ(policy_->Check("data.path", dir_.Join("secret/none"), PathKind::kData, true).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(policy_->Check("data.path", "/" + std::string(5000, 'a'), PathKind::kData, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(policy_->Check("data.path", std::string("/a\0b", 4), PathKind::kData, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PathPolicyTest, NoRootsMeansNoPaths) {
  auto s = policy_->Check("model", dir_.Join("data"), PathKind::kModel, true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied);
}

// Issue 18: a 4 KB path is not repeated whole in the message.
TEST_F(PathPolicyTest, LongPathsAreEchoedShort) {
  const std::string long_name = "/" + std::string(4000, 'p');
  for (const std::string& path : {long_name, std::string(4000, 'r'), dir_.Join("secret") + long_name,
                                  dir_.Join("data") + long_name}) {
    auto s = policy_->Check("data.path", path, PathKind::kData, true);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("data.path"), absl::string_view::npos) << s.status();
    EXPECT_LT(s.status().message().size(), 1024u) << s.status().message().substr(0, 2000);
  }
  auto policy = PathPolicy::Create(PathRoots{{"/nonexistent" + long_name}, {}, {}});
  ASSERT_FALSE(policy.ok());
  EXPECT_LT(policy.status().message().size(), 1024u);
}

TEST(PathPolicyCreateTest, MissingRootIsAnErrorNamingTheFlag) {
  auto policy = PathPolicy::Create(PathRoots{{"/nonexistent/slidedp/root"}, {}, {}});
  ASSERT_FALSE(policy.ok());
  EXPECT_NE(policy.status().message().find("--model_roots"), absl::string_view::npos);
}

}  // namespace
}  // namespace slidedp::server
