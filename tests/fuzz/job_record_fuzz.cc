// libFuzzer entry point for the daemon's job-store record reader (server/job_record.h):
// any bytes as a stored record, the first byte as the row's state column. It never
// crashes, and what it returns is a job the daemon can serve: the row's id, a valid
// state, only valid UTF-8 text (it serializes and parses back unchanged). Built and run
// by deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/io/user_text.h"
#include "server/job_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t state = static_cast<int8_t>(data[0]);
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  slidedp::server::JobRecord r =
      slidedp::server::ParseJobRecord(bytes, "job-fuzz\xff", state, "/state/jobs.db");
  if (r.job.id() != "job-fuzz\\xFF") __builtin_trap();
  if (!slidedp::v1::JobState_IsValid(r.job.state()) ||
      r.job.state() == slidedp::v1::JOB_STATE_UNSPECIFIED) {
    __builtin_trap();
  }
  if (r.unreadable && r.job.state() != slidedp::v1::JOB_STATE_FAILED) __builtin_trap();
  if (!slidedp::IsValidUtf8(r.problem)) __builtin_trap();
  slidedp::v1::Job copy = r.job;
  if (slidedp::server::MakeTextValidUtf8(&copy)) __builtin_trap();  // nothing left to escape
  std::string stored;
  if (!r.job.SerializeToString(&stored)) __builtin_trap();
  slidedp::v1::Job back;
  if (!back.ParseFromString(stored)) __builtin_trap();
  if (back.SerializeAsString() != stored) __builtin_trap();
  return 0;
}
