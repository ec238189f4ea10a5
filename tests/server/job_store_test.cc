// JobStore: insert, replace in place, order, reopen, corrupt records, bad paths.
#include "server/job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/server/raw_job_row.h"
#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

using testing::InsertRawJobRow;
using testing::TempDir;

v1::Job MakeJob(const std::string& id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_spec()->set_model("tiny");
  return job;
}

TEST(JobStoreTest, KeepsSubmissionOrderAndReplacesInPlace) {
  TempDir dir;
  auto store = JobStore::Open(dir.Join("jobs.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put(MakeJob("a", v1::JOB_STATE_QUEUED)).ok());
  ASSERT_TRUE((*store)->Put(MakeJob("b", v1::JOB_STATE_QUEUED)).ok());
  v1::Job a = MakeJob("a", v1::JOB_STATE_SUCCEEDED);
  a.set_weights_digest("0123456789abcdef");
  ASSERT_TRUE((*store)->Put(a).ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id(), "a");
  EXPECT_EQ((*jobs)[0].state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ((*jobs)[0].weights_digest(), "0123456789abcdef");
  EXPECT_EQ((*jobs)[1].id(), "b");
}

TEST(JobStoreTest, SurvivesReopening) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.Join("jobs.db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(MakeJob("x", v1::JOB_STATE_FAILED)).ok());
  }
  auto store = JobStore::Open(dir.Join("jobs.db"));
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state(), v1::JOB_STATE_FAILED);
}

// A record that does not parse no longer fails the whole load: it is a FAILED job
// naming its stored state and why, and the other records load.
TEST(JobStoreTest, CorruptRecordIsAFailedJobNamingItAndTheOthersLoad) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.Join("jobs.db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(MakeJob("before", v1::JOB_STATE_SUCCEEDED)).ok());
  }
  InsertRawJobRow(dir.Join("jobs.db"), "broken", v1::JOB_STATE_RUNNING, "\xff\xff\xff\xff");
  {
    auto store = JobStore::Open(dir.Join("jobs.db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(MakeJob("after", v1::JOB_STATE_QUEUED)).ok());
  }
  auto store = JobStore::Open(dir.Join("jobs.db"));
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id(), "before");
  EXPECT_EQ((*jobs)[0].state(), v1::JOB_STATE_SUCCEEDED);
  const v1::Job& broken = (*jobs)[1];
  EXPECT_EQ(broken.id(), "broken");
  EXPECT_EQ(broken.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(broken.error().find("could not read this job's record"), std::string::npos) << broken.error();
  EXPECT_NE(broken.error().find("JOB_STATE_RUNNING"), std::string::npos) << broken.error();
  EXPECT_NE(broken.error().find("jobs.db"), std::string::npos) << broken.error();
  EXPECT_EQ((*jobs)[2].id(), "after");
  EXPECT_EQ((*jobs)[2].state(), v1::JOB_STATE_QUEUED);
}

// Issue 18: a daemon before the fix stored Job.error with the raw bytes of a data file
// (\xff\xfe), which proto3 refuses to parse; the record is read with the bytes escaped.
TEST(JobStoreTest, RecordWithInvalidUtf8FromAnOldDaemonLoadsEscaped) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.Join("jobs.db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(MakeJob("good", v1::JOB_STATE_SUCCEEDED)).ok());
  }
  v1::Job old = MakeJob("job-0000000000ff", v1::JOB_STATE_FAILED);
  old.set_error("step 1: data.jsonl:1: not JSON: \xff\xfe[1,2,3]");
  old.set_step(3);
  std::string blob;
  ASSERT_TRUE(old.SerializeToString(&blob));  // proto3 only logs the bad text here
  v1::Job check;
  ASSERT_FALSE(check.ParseFromString(blob)) << "the premise: such a record does not parse";
  InsertRawJobRow(dir.Join("jobs.db"), old.id(), old.state(), blob);
  auto store = JobStore::Open(dir.Join("jobs.db"));
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id(), "good");
  const v1::Job& loaded = (*jobs)[1];
  EXPECT_EQ(loaded.id(), old.id());
  EXPECT_EQ(loaded.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(loaded.step(), 3);
  EXPECT_EQ(loaded.spec().model(), "tiny");
  EXPECT_EQ(loaded.error(), "step 1: data.jsonl:1: not JSON: \\xFF\\xFE[1,2,3]");
  // Put writes valid text whatever it is given, so the record parses from now on.
  ASSERT_TRUE((*store)->Put(old).ok());
  auto again = (*store)->LoadAll();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[1].error(), loaded.error());
  std::string stored;
  ASSERT_TRUE((*again)[1].SerializeToString(&stored));
  EXPECT_TRUE(check.ParseFromString(stored));
}

TEST(JobStoreTest, FullDatabaseIsResourceExhaustedNamingTheFile) {
  TempDir dir;
  auto store = JobStore::Open(dir.Join("jobs.db"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Put(MakeJob("a", v1::JOB_STATE_QUEUED)).ok());
  ASSERT_TRUE((*store)->SetMaxPages(1).ok());  // no room to grow
  v1::Job big = MakeJob("b", v1::JOB_STATE_QUEUED);
  big.mutable_spec()->set_output_dir(std::string(20000, 'o'));
  absl::Status s = (*store)->Put(big);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(dir.Join("jobs.db")), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("full"), absl::string_view::npos) << s;
  ASSERT_TRUE((*store)->SetMaxPages(1 << 30).ok());
  EXPECT_TRUE((*store)->Put(big).ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), 2u);
}

TEST(JobStoreTest, UnopenablePathIsAnErrorNamingIt) {
  auto store = JobStore::Open("/nonexistent/dir/jobs.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/nonexistent/dir/jobs.db"), absl::string_view::npos);
}

}  // namespace
}  // namespace slidedp::server
