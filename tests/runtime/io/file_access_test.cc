// Tests of runtime/io/file_access and of every reader and writer of job files that goes
// through it (issue 18): a FIFO, a directory, a device or a socket given as any job
// file is refused promptly instead of blocking the job thread for good; with roots set,
// a file that is outside them when it is opened (a symlink swapped in after the check)
// is refused, and a checkpoint, export or cache folder swapped for a symlink to outside
// receives nothing. Files live in a fresh directory per test under TempDir().
#include "tests/test_support.h"
#include "runtime/io/file_access.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/data/data_file_mapping.h"
#include "runtime/data/jsonl_tokens.h"
#include "runtime/data/token_cache.h"
#include "runtime/data/token_file.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/model/atomic_file.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"
#include "runtime/state/checkpoint.h"
#include "runtime/train_config.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test under TempDir(), canonical (roots must be).
std::string TestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::path(::testing::TempDir()) / (std::string("file_access_") + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return fs::canonical(dir).string();
}

std::string WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  EXPECT_TRUE(out.good()) << path;
  return path;
}

std::string MakeFifo(const std::string& path) {
  EXPECT_EQ(::mkfifo(path.c_str(), 0644), 0) << path;
  return path;
}

// Runs `open` (which opens `fifo` through some reader) on another thread and expects it
// to return an error within a generous deadline. If it blocks, the test fails and the
// reader is released by opening the FIFO for writing (so the test never hangs).
absl::Status RefusesPromptly(const std::string& fifo, std::function<absl::Status()> open) {
  std::future<absl::Status> result = std::async(std::launch::async, std::move(open));
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "opening the FIFO " << fifo << " blocked";
    for (;;) {  // the reader is blocked in open(): a writer releases it
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (w >= 0) {
        ::close(w);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  absl::Status s = result.get();
  EXPECT_FALSE(s.ok()) << fifo;
  return s;
}

void ExpectNotRegular(const absl::Status& s, const std::string& kind) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kind)) << s;
}

ModelConfig TinyLlama() { return testing::TinyLlamaConfig(); }

// ---------------------------------------------------------------- OpenRegularFile

TEST(FileAccessTest, OpensRegularFilesAndRefusesEverythingElse) {
  const std::string dir = TestDir();
  const std::string file = WriteFile(dir + "/data.bin", "hello");
  absl::StatusOr<std::string> text = ReadRegularFile(file, 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello");
  // The descriptor comes back blocking.
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(file);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_NONBLOCK, 0);

  EXPECT_EQ(ReadRegularFile(file, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenRegularFile(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  ExpectNotRegular(OpenRegularFile(dir).status(), "is a directory");
  ExpectNotRegular(OpenRegularFile("/dev/zero").status(), "character device");
  const std::string fifo = MakeFifo(dir + "/fifo");
  ExpectNotRegular(RefusesPromptly(fifo, [&] { return OpenRegularFile(fifo).status(); }), "FIFO");

  const std::string sock_path = dir + "/sock";
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ExpectNotRegular(OpenRegularFile(sock_path).status(), "socket");
  ::close(sock);
}

// ---------------------------------------------------------------- FIFOs, every reader

TEST(FileAccessTest, EveryReaderRefusesAFifoPromptly) {
  const std::string dir = TestDir();
  const std::string fifo = MakeFifo(dir + "/fifo");
  auto check = [&](const char* what, std::function<absl::Status()> open) {
    SCOPED_TRACE(what);
    ExpectNotRegular(RefusesPromptly(fifo, std::move(open)), "FIFO");
  };
  check("DataFileMapping", [&] { return DataFileMapping::Open(fifo).status(); });
  check("tokens", [&] { return OpenTokenFile(fifo, TokenDtype::kUint16, 100).status(); });
  check("jsonl", [&] { return LoadJsonlTokens(fifo, 100).status(); });
  check("tokenizer.json", [&] { return Tokenizer::Load(fifo).status(); });
  check("safetensors", [&] { return SafetensorsFile::Open(fifo).status(); });
  check("checkpoint meta", [&] { return ReadCheckpointMeta(fifo).status(); });
  check("checkpoint", [&] { return ReadCheckpoint(fifo, {}).status(); });
  check("token cache", [&] { return OpenTokenCache(fifo, "key").status(); });
  check("train config", [&] { return LoadTrainConfig(fifo).status(); });

  // A model folder whose config.json or index.json is a FIFO.
  const std::string model = dir + "/model";
  fs::create_directories(model);
  MakeFifo(model + "/config.json");
  {
    SCOPED_TRACE("config.json");
    ExpectNotRegular(RefusesPromptly(model + "/config.json", [&] { return LoadModelConfig(model).status(); }),
                     "FIFO");
  }
  MakeFifo(model + "/model.safetensors.index.json");
  const ModelLayout layout = BuildLayout(TinyLlama());
  std::vector<float> sink(1 << 16);
  {
    SCOPED_TRACE("index.json");
    ExpectNotRegular(RefusesPromptly(model + "/model.safetensors.index.json",
                                     [&] { return LoadHfWeights(model, layout, [&](int, int) { return sink.data(); }); }),
                     "FIFO");
  }
}

// ---------------------------------------------------------------- roots, reads

TEST(FileAccessTest, AFileSwappedForASymlinkOutsideTheRootsIsRefusedAtOpen) {
  const std::string dir = TestDir();
  const std::string root = dir + "/root", outside = dir + "/outside";
  fs::create_directories(root + "/sub");
  fs::create_directories(outside);
  const std::string secret = WriteFile(outside + "/secret.jsonl", "[1, 2, 3]\n");
  const std::string data = WriteFile(root + "/sub/train.jsonl", "[4, 5, 6]\n");
  ScopedFileRoots roots(FileRoots{{root}, {root}});
  // Inside the root (the daemon's check at submit would pass): it opens.
  ASSERT_TRUE(LoadJsonlTokens(data, 100).ok());
  // Then the file is replaced by a symlink to outside: refused at open.
  fs::remove(data);
  fs::create_symlink(secret, data);
  absl::Status s = LoadJsonlTokens(data, 100).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "outside the allowed read roots")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), root)) << s;
  // A folder on the way swapped for a symlink: the same.
  fs::remove_all(root + "/sub");
  fs::create_directory_symlink(outside, root + "/sub");
  EXPECT_EQ(DataFileMapping::Open(root + "/sub/secret.jsonl").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadRegularFile(root + "/sub/secret.jsonl", 100).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A symlink that stays inside the root is fine.
  WriteFile(root + "/real.jsonl", "[7]\n");
  fs::create_symlink(root + "/real.jsonl", root + "/alias.jsonl");
  EXPECT_TRUE(LoadJsonlTokens(root + "/alias.jsonl", 100).ok());
}

TEST(FileAccessTest, UnrestrictedByDefaultAndScopedRootsRestore) {
  EXPECT_FALSE(CurrentFileRoots().has_value());
  {
    ScopedFileRoots roots(FileRoots{{"/nonexistent-root"}, {}});
    EXPECT_TRUE(CurrentFileRoots().has_value());
    EXPECT_EQ(ReadRegularFile("/proc/self/status", 1 << 20).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_FALSE(CurrentFileRoots().has_value());
  EXPECT_TRUE(ReadRegularFile("/proc/self/status", 1 << 20).ok());
}

// ---------------------------------------------------------------- roots, writes

std::vector<CheckpointUnit> Units(std::vector<float>& buf) {
  return {CheckpointUnit{"u", static_cast<int64_t>(buf.size() / 3), buf.data(),
                         Fp32Moments(buf.data() + buf.size() / 3, buf.data() + 2 * buf.size() / 3)}};
}

TEST(FileAccessTest, ACheckpointFolderSwappedForASymlinkOutsideReceivesNothing) {
  const std::string dir = TestDir();
  const std::string root = dir + "/out", outside = dir + "/outside";
  fs::create_directories(root + "/ckpt");
  fs::create_directories(outside);
  std::vector<float> buf(12, 1.0f);
  ScopedFileRoots roots(FileRoots{{root}, {root}});
  CheckpointMeta meta;
  meta.step = 1;
  absl::StatusOr<std::string> written = WriteCheckpoint(root + "/ckpt", meta, Units(buf), 2);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(ReadCheckpoint(*written, Units(buf)).ok());
  // The folder becomes a symlink to outside after the daemon checked the path.
  fs::remove_all(root + "/ckpt");
  fs::create_directory_symlink(outside, root + "/ckpt");
  meta.step = 2;
  absl::Status s = WriteCheckpoint(root + "/ckpt", meta, Units(buf), 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // A missing folder below a symlink to outside: not created there either.
  s = WriteCheckpoint(root + "/ckpt/deeper/still", meta, Units(buf), 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(fs::is_empty(outside)) << "something was written outside the roots";
}

TEST(FileAccessTest, AnExportFolderSwappedForASymlinkOutsideReceivesNothing) {
  const std::string dir = TestDir();
  const std::string root = dir + "/out", outside = dir + "/outside";
  fs::create_directories(root);
  fs::create_directories(outside);
  const ModelConfig config = TinyLlama();
  const ModelLayout layout = BuildLayout(config);
  std::vector<float> zeros(1 << 16, 0.0f);
  auto src = [&](int, int) -> const float* { return zeros.data(); };
  ScopedFileRoots roots(FileRoots{{root}, {root}});
  ASSERT_TRUE(SaveHfModel(root + "/export", config, layout, src, "F32", 1 << 30).ok());
  fs::remove_all(root + "/export");
  fs::create_directory_symlink(outside, root + "/export");
  absl::Status s = SaveHfModel(root + "/export", config, layout, src, "F32", 1 << 30);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // Token caches and any AtomicFile: the same.
  TokenizedCorpus corpus;
  corpus.ids = {1, 2, 3};
  corpus.flags = {0, 0, 0};
  corpus.documents = 1;
  corpus.max_id = 3;
  s = WriteTokenCache(root + "/export/cache/x.slidedp-tokens", "key", corpus);
  EXPECT_FALSE(s.ok());
  AtomicFile f;
  EXPECT_EQ(f.Open(root + "/export/config.json").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(fs::is_empty(outside)) << "something was written outside the roots";
  // Inside the roots a cache is written and read back.
  EXPECT_TRUE(WriteTokenCache(root + "/cache/x.slidedp-tokens", "key", corpus).ok());
  EXPECT_TRUE(OpenTokenCache(root + "/cache/x.slidedp-tokens", "key").ok());
}

TEST(FileAccessTest, AtomicFileReplacesAStaleTemporaryFileOrSymlink) {
  const std::string dir = TestDir();
  const std::string victim = WriteFile(dir + "/victim", "keep");
  fs::create_symlink(victim, dir + "/out.json.tmp");  // a planted temporary name
  AtomicFile f;
  ASSERT_TRUE(f.Open(dir + "/out.json").ok());
  ASSERT_TRUE(f.Append("new", 3).ok());
  ASSERT_TRUE(f.Commit().ok());
  EXPECT_EQ(*ReadRegularFile(dir + "/out.json", 100), "new");
  EXPECT_EQ(*ReadRegularFile(victim, 100), "keep");
}

}  // namespace
}  // namespace slidedp
