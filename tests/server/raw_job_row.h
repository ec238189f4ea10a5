// Writes a row of the daemon's job store as it is, bypassing JobStore::Put (as a daemon
// before issue 18 could), for the tests of unreadable records. Header-only; the test's
// thread.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

namespace slidedp::server::testing {

inline void InsertRawJobRow(const std::string& db_path, const std::string& id, int state, const std::string& blob) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO jobs(id, state, job) VALUES(?1, ?2, ?3)", -1, &stmt, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(stmt, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(stmt, 2, state);
  sqlite3_bind_blob(stmt, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  EXPECT_EQ(sqlite3_step(stmt), SQLITE_DONE);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

}  // namespace slidedp::server::testing
