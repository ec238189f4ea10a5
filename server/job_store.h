// JobStore: the daemon's job records in an embedded SQLite database (one row per job,
// the slidedp.v1.Job message serialized), so that a restarted daemon finds every job
// as it was. Records are read and made UTF-8 by server/job_record.h. Thread-safe: every
// method takes the store's mutex.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "slidedp/v1/job.pb.h"

struct sqlite3;

namespace slidedp::server {

class JobStore {
 public:
  // Opens or creates the database file `path` (its directory must exist). Errors name
  // the file and SQLite's message.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Inserts `job`, or replaces the record with the same id (which keeps its place in
  // the submission order), its text made valid UTF-8 first. Durable when it returns
  // (WAL, synchronous=NORMAL: survives a daemon crash; a power loss may lose the last
  // updates). RESOURCE_EXHAUSTED naming the file when the disk (or the database's page
  // limit) is full; INTERNAL for other SQLite errors.
  absl::Status Put(const v1::Job& job);

  // Every job in submission order. A record that cannot be read does not fail the load:
  // it is logged with its id and why, and comes back as a FAILED job whose error says so
  // (ParseJobRecord). Errors only when the table itself cannot be read.
  absl::StatusOr<std::vector<v1::Job>> LoadAll();

  // For tests: caps the database at `pages` pages (SQLite's max_page_count; never below
  // its current size), so that writes which need more space fail with SQLITE_FULL as on
  // a full disk. A large value lifts the cap.
  absl::Status SetMaxPages(int64_t pages);

  const std::string& path() const { return path_; }

 private:
  JobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SQLite's last error (`rc`) while doing `what`: RESOURCE_EXHAUSTED for a full disk.
  absl::Status Error(absl::string_view what, int rc) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  const std::string path_;
};

}  // namespace slidedp::server
