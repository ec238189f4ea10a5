// JobStore: SQLite persistence of job records. Thread-safe (one mutex).
#include "server/job_store.h"

#include <errno.h>
#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "server/job_record.h"
#include "server/log.h"

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

namespace {

// A full disk reaches SQLite as SQLITE_FULL, or as an I/O error whose errno says so.
bool DiskFull(int rc, int system_errno) {
  if ((rc & 0xff) == SQLITE_FULL) return true;
  return (rc & 0xff) == SQLITE_IOERR && (system_errno == ENOSPC || system_errno == EDQUOT);
}

}  // namespace

absl::Status JobStore::Error(absl::string_view what, int rc) const {
  const std::string message = sqlite3_errmsg(db_);
  if (DiskFull(rc, sqlite3_system_errno(db_))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        path_, ": ", what, ": the disk holding the job database is full (", message, ")"));
  }
  return absl::InternalError(absl::StrCat(path_, ": ", what, ": ", message));
}

absl::Status JobStore::Exec(const char* sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    const std::string text = message ? message : "?";
    sqlite3_free(message);
    if (DiskFull(rc, sqlite3_system_errno(db_))) return Error(absl::StrCat("\"", sql, "\""), rc);
    return absl::InternalError(absl::StrCat(path_, ": \"", sql, "\": ", text));
  }
  return absl::OkStatus();
}

absl::Status JobStore::SetMaxPages(int64_t pages) {
  absl::MutexLock lock(&mu_);
  const std::string sql = absl::StrCat("PRAGMA max_page_count = ", pages);
  return Exec(sql.c_str());
}

absl::Status JobStore::Put(const v1::Job& original) {
  v1::Job job = original;
  if (MakeTextValidUtf8(&job)) {
    Log(absl::StrCat("job ", job.id(), ": text that is not UTF-8 escaped before writing it"));
  }
  std::string blob;
  if (!job.SerializeToString(&blob)) {
    return absl::InternalError(absl::StrCat("job ", job.id(), ": cannot serialize"));
  }
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* raw = nullptr;
  const char* sql =
      "INSERT INTO jobs(id, state, job) VALUES(?1, ?2, ?3) "
      "ON CONFLICT(id) DO UPDATE SET state = excluded.state, job = excluded.job";
  if (int rc = sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr); rc != SQLITE_OK) {
    return Error("prepare", rc);
  }
  Statement stmt(raw);
  sqlite3_bind_text(raw, 1, job.id().data(), static_cast<int>(job.id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(raw, 2, static_cast<int>(job.state()));
  sqlite3_bind_blob(raw, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  if (int rc = sqlite3_step(raw); rc != SQLITE_DONE) {
    return Error(absl::StrCat("write job ", job.id()), rc);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Job>> JobStore::LoadAll() {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* raw = nullptr;
  if (int rc = sqlite3_prepare_v2(db_, "SELECT id, state, job FROM jobs ORDER BY seq", -1, &raw,
                                  nullptr);
      rc != SQLITE_OK) {
    return Error("prepare", rc);
  }
  Statement stmt(raw);
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(raw)) == SQLITE_ROW) {
    const char* id = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
    const int id_size = sqlite3_column_bytes(raw, 0);
    const int64_t state = sqlite3_column_int64(raw, 1);
    const char* blob = static_cast<const char*>(sqlite3_column_blob(raw, 2));
    const int size = sqlite3_column_bytes(raw, 2);
    JobRecord record = ParseJobRecord(std::string_view(blob ? blob : "", blob ? size : 0),
                                      std::string_view(id ? id : "", id ? id_size : 0), state,
                                      path_);
    if (!record.problem.empty()) {
      Log(absl::StrCat(path_, ": the record of job ", record.job.id(), " ",
                       record.unreadable ? "cannot be read: " : "was repaired: ", record.problem,
                       record.unreadable ? "; the job is shown as FAILED and not resumed" : ""));
    }
    jobs.push_back(std::move(record.job));
  }
  if (rc != SQLITE_DONE) return Error("read jobs", rc);
  return jobs;
}

}  // namespace slidedp::server
