// Job records as the JobStore keeps them: the slidedp.v1.Job message serialized, next to
// its id and state columns. Reading a record never fails: text that is not UTF-8 (from a
// daemon before issue 18) is escaped, and a record that does not parse at all becomes a
// FAILED job that says so. Writing makes every string valid UTF-8 first. Pure
// functions; any thread. Fuzzed by tests/fuzz/job_record_fuzz.cc.
#pragma once

#include <string>
#include <string_view>

#include "google/protobuf/message.h"
#include "slidedp/v1/job.pb.h"

namespace slidedp::server {

struct JobRecord {
  v1::Job job;
  // Empty when the record was read as written; otherwise what was wrong with it (for
  // the log): its text was repaired, or it could not be read and `job` is a FAILED
  // stand-in that is never resumed.
  std::string problem;
  bool unreadable = false;  // `job` is the stand-in
};

// The job stored as `bytes` in the row with columns `id` and `state`. `store` (the
// database file) is named in the stand-in's error. The result always has a valid state,
// the row's id, and only valid UTF-8 text.
JobRecord ParseJobRecord(std::string_view bytes, std::string_view id, int64_t state,
                         std::string_view store);

// Replaces every string field of `message` (nested and repeated ones included) that is
// not valid UTF-8 by its ValidUtf8 escape. True if anything changed.
bool MakeTextValidUtf8(google::protobuf::Message* message);

}  // namespace slidedp::server
