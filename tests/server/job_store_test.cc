// JobStore: insert, replace in place, order, reopen, corrupt records, bad paths.
#include "server/job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

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

TEST(JobStoreTest, CorruptRecordIsDataLossNamingTheJob) {
  TempDir dir;
  {
    auto store = JobStore::Open(dir.Join("jobs.db"));
    ASSERT_TRUE(store.ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.Join("jobs.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO jobs(id, state, job) VALUES('broken', 1, x'ffffffff')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = JobStore::Open(dir.Join("jobs.db"));
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(jobs.status().message().find("broken"), absl::string_view::npos);
}

TEST(JobStoreTest, UnopenablePathIsAnErrorNamingIt) {
  auto store = JobStore::Open("/nonexistent/dir/jobs.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/nonexistent/dir/jobs.db"), absl::string_view::npos);
}

}  // namespace
}  // namespace slidedp::server
