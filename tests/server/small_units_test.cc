// The daemon's small units: status conversion, listen addresses, job ids, token
// comparison, /proc readers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "server/grpc_status.h"
#include "server/listen_address.h"
#include "server/proc_stats.h"
#include "server/service.h"
#include "server/thread_priority.h"
#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

TEST(GrpcStatusTest, CodesMapOneToOneAndMessagesAreKept) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status s(static_cast<absl::StatusCode>(code), "why");
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "why");
  }
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::PermissionDeniedError("x")).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "x")).error_code(),
            grpc::StatusCode::UNKNOWN);
}

TEST(ListenAddressTest, ParsesHostPort) {
  auto a = ParseHostPort("127.0.0.1:9464");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9464);
  auto v6 = ParseHostPort("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_FALSE(ParseHostPort("localhost").ok());
  EXPECT_FALSE(ParseHostPort("host:70000").ok());
  EXPECT_FALSE(ParseHostPort("host:-1").ok());
  EXPECT_FALSE(ParseHostPort("::1:80").ok());
  EXPECT_FALSE(ParseHostPort(":80").ok());
}

TEST(ListenAddressTest, ClassifiesLoopback) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:1"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/tmp/x.sock"));
  EXPECT_TRUE(IsLoopbackAddress("ipv4:127.0.0.1:5"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:50051"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:50051"));
  EXPECT_FALSE(IsLoopbackAddress("example.com:50051"));
  EXPECT_FALSE(IsLoopbackAddress("garbage"));
}

TEST(JobIdTest, RejectsEmptyHugeAndUnprintableIds) {
  EXPECT_TRUE(CheckJobId("job-0123456789ab").ok());
  EXPECT_EQ(CheckJobId("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckJobId(std::string(1000, 'a')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckJobId("job\n1").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckJobId(std::string("a\0b", 3)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abd", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer ab", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

TEST(ProcStatsTest, ReadsStatWithSpacesAndParensInTheCommand) {
  testing::TempDir dir;
  // pid (comm) state ppid ... utime(14) stime(15)
  testing::WriteFile(dir.Join("stat"),
                     "42 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1 0 100 0 0\n");
  auto cpu = ProcessCpuSeconds(dir.Join("stat"));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_NEAR(*cpu, 400.0 / sysconf(_SC_CLK_TCK), 1e-9);
  testing::WriteFile(dir.Join("bad"), "42 no parens");
  EXPECT_FALSE(ProcessCpuSeconds(dir.Join("bad")).ok());
  EXPECT_TRUE(ProcessCpuSeconds().ok());
  EXPECT_GT(*ProcessResidentBytes(), 0);
}

TEST(ProcStatsTest, ReadsMeminfoAndNvidiaGpus) {
  testing::TempDir dir;
  testing::WriteFile(dir.Join("meminfo"), "MemTotal:  1000 kB\nMemFree: 5 kB\nMemAvailable:   600 kB\n");
  auto memory = ReadHostMemory(dir.Join("meminfo"));
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->total_bytes, 1024000);
  EXPECT_EQ(memory->available_bytes, 614400);
  testing::WriteFile(dir.Join("empty"), "");
  EXPECT_FALSE(ReadHostMemory(dir.Join("empty")).ok());
  std::filesystem::create_directories(dir.Join("gpus/0000:1b:00.0"));
  testing::WriteFile(dir.Join("gpus/0000:1b:00.0/information"),
                     "Model: \t\t NVIDIA H200\nIRQ:   1\nBus Location: \t 0000:1b:00.0\n");
  auto gpus = ReadNvidiaGpus(dir.Join("gpus"));
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].name, "NVIDIA H200");
  EXPECT_EQ(gpus[0].bus_id, "0000:1b:00.0");
  EXPECT_TRUE(ReadNvidiaGpus(dir.Join("none")).empty());
}

}  // namespace
}  // namespace slidedp::server

namespace slidedp::server {
namespace {

TEST(ThreadPriorityTest, RaisesTheCallingThreadsNiceOnceAndNoOtherThreads) {
  const int main_nice = CallingThreadNice();
  int before = 0, after_first = 0, after_second = 0, zero_before = 0, zero_after = 0;
  std::thread t([&] {
    before = CallingThreadNice();
    LowerCallingThreadPriority(5);
    after_first = CallingThreadNice();
    LowerCallingThreadPriority(5);  // once a thread
    after_second = CallingThreadNice();
  });
  t.join();
  std::thread z([&] {
    zero_before = CallingThreadNice();
    LowerCallingThreadPriority(0);
    zero_after = CallingThreadNice();
  });
  z.join();
  EXPECT_EQ(after_first, std::min(19, before + 5));
  EXPECT_EQ(after_second, after_first);
  EXPECT_EQ(zero_after, zero_before);
  EXPECT_EQ(CallingThreadNice(), main_nice) << "other threads keep their priority";
}

}  // namespace
}  // namespace slidedp::server
