// DataCursor: a dataset's position (epoch, window index within the epoch) and the
// identity it must be restored into (seed, window count, seq_len, shuffle), serialized
// as a one-line JSON object, e.g.
//   {"cursor":"slidedp.data","epoch":2,"index":17,"seed":1234,"seq_len":128,
//    "shuffle":true,"version":1,"windows":9000}
// Plain data; no threads.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace slidedp {

inline constexpr int kDataCursorVersion = 1;

struct DataCursor {
  int64_t epoch = 0;
  int64_t index = 0;  // next window to return, in [0, windows)
  uint64_t seed = 0;
  int64_t windows = 0;  // windows per epoch
  int64_t seq_len = 0;
  bool shuffle = false;
};

std::string SerializeDataCursor(const DataCursor& cursor);

// InvalidArgument if `text` is not a cursor SerializeDataCursor wrote (any version but
// kDataCursorVersion, missing or mistyped fields, index outside [0, windows), epoch < 0).
absl::StatusOr<DataCursor> ParseDataCursor(const std::string& text);

// OK if `saved` may be restored into a dataset whose identity is `current` (same seed,
// windows, seq_len and shuffle); otherwise FailedPrecondition naming what differs.
absl::Status CheckCursorMatches(const DataCursor& saved, const DataCursor& current);

}  // namespace slidedp
