// JobStore: SQLite persistence of job records. Thread-safe (one mutex).
#include "server/job_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace slidedp::server {
namespace {

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS jobs ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  state INTEGER NOT NULL,"
    "  job BLOB NOT NULL)";

// Finalizes a prepared statement on scope exit.
struct StatementCloser {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using Statement = std::unique_ptr<sqlite3_stmt, StatementCloser>;

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                     SQLITE_OPEN_FULLMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat(path, ": cannot open job database: ", message));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<JobStore> store(new JobStore(db, path));
  absl::MutexLock lock(&store->mu_);
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", kSchema}) {
    if (absl::Status s = store->Exec(sql); !s.ok()) return s;
  }
  return store;
}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status JobStore::Error(absl::string_view what) const {
  return absl::InternalError(absl::StrCat(path_, ": ", what, ": ", sqlite3_errmsg(db_)));
}

absl::Status JobStore::Exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    absl::Status s =
        absl::InternalError(absl::StrCat(path_, ": \"", sql, "\": ", message ? message : "?"));
    sqlite3_free(message);
    return s;
  }
  return absl::OkStatus();
}

absl::Status JobStore::Put(const v1::Job& job) {
  std::string blob;
  if (!job.SerializeToString(&blob)) {
    return absl::InternalError(absl::StrCat("job ", job.id(), ": cannot serialize"));
  }
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* raw = nullptr;
  const char* sql =
      "INSERT INTO jobs(id, state, job) VALUES(?1, ?2, ?3) "
      "ON CONFLICT(id) DO UPDATE SET state = excluded.state, job = excluded.job";
  if (sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr) != SQLITE_OK) return Error("prepare");
  Statement stmt(raw);
  sqlite3_bind_text(raw, 1, job.id().data(), static_cast<int>(job.id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(raw, 2, static_cast<int>(job.state()));
  sqlite3_bind_blob(raw, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(raw) != SQLITE_DONE) return Error(absl::StrCat("write job ", job.id()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Job>> JobStore::LoadAll() {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT id, job FROM jobs ORDER BY seq", -1, &raw, nullptr) !=
      SQLITE_OK) {
    return Error("prepare");
  }
  Statement stmt(raw);
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(raw)) == SQLITE_ROW) {
    const char* id = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
    const void* blob = sqlite3_column_blob(raw, 1);
    const int size = sqlite3_column_bytes(raw, 1);
    v1::Job job;
    if (size < 0 || !job.ParseFromArray(blob, size)) {
      return absl::DataLossError(
          absl::StrCat(path_, ": record of job ", id ? id : "?", " does not parse"));
    }
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return Error("read jobs");
  return jobs;
}

}  // namespace slidedp::server
