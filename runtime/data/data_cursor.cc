// DataCursor: see data_cursor.h.
#include "runtime/data/data_cursor.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

using nlohmann::json;

constexpr char kCursorTag[] = "slidedp.data";

absl::Status CursorError(const std::string& text, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("data cursor '%s' is not valid: %s", Echo(text), what));
}

// Reads the integer field `name` into *out; false if absent, not an integer or out of
// T's range.
bool GetInteger(const json& j, const char* name, int64_t* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX}) return false;
  *out = it->get<int64_t>();
  return true;
}

bool GetInteger(const json& j, const char* name, uint64_t* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

}  // namespace

std::string SerializeDataCursor(const DataCursor& c) {
  json j = {{"cursor", kCursorTag}, {"version", kDataCursorVersion},
            {"epoch", c.epoch},     {"index", c.index},
            {"seed", c.seed},       {"windows", c.windows},
            {"seq_len", c.seq_len}, {"shuffle", c.shuffle}};
  return j.dump();
}

absl::StatusOr<DataCursor> ParseDataCursor(const std::string& text) {
  if (JsonNestingExceeded(text, kMaxJsonNesting) != 0) {
    return CursorError(text, absl::StrCat("JSON nested deeper than ", kMaxJsonNesting, " levels"));
  }
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return CursorError(text, "not a JSON object");
  auto tag = j.find("cursor");
  if (tag == j.end() || !tag->is_string() || tag->get<std::string>() != kCursorTag) {
    return CursorError(text, absl::StrFormat("no \"cursor\": \"%s\" tag", kCursorTag));
  }
  int64_t version = 0;
  if (!GetInteger(j, "version", &version) || version != kDataCursorVersion) {
    return CursorError(text, absl::StrFormat("version is not %d", kDataCursorVersion));
  }
  DataCursor c;
  if (!GetInteger(j, "epoch", &c.epoch) || !GetInteger(j, "index", &c.index) ||
      !GetInteger(j, "seed", &c.seed) || !GetInteger(j, "windows", &c.windows) ||
      !GetInteger(j, "seq_len", &c.seq_len)) {
    return CursorError(text, "epoch, index, seed, windows and seq_len must be integers");
  }
  auto shuffle = j.find("shuffle");
  if (shuffle == j.end() || !shuffle->is_boolean()) {
    return CursorError(text, "shuffle must be true or false");
  }
  c.shuffle = shuffle->get<bool>();
  if (c.epoch < 0 || c.windows < 1 || c.index < 0 || c.index >= c.windows) {
    return CursorError(text, "need epoch >= 0, windows >= 1 and 0 <= index < windows");
  }
  return c;
}

absl::Status CheckCursorMatches(const DataCursor& saved, const DataCursor& current) {
  auto mismatch = [](const char* what, const std::string& saved, const std::string& current) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "data cursor was saved for a dataset with %s %s, this dataset has %s %s (a different "
        "file, seq_len or setting?)",
        what, saved, what, current));
  };
  if (saved.seed != current.seed) {
    return mismatch("seed", absl::StrCat(saved.seed), absl::StrCat(current.seed));
  }
  if (saved.seq_len != current.seq_len) {
    return mismatch("seq_len", absl::StrCat(saved.seq_len), absl::StrCat(current.seq_len));
  }
  if (saved.windows != current.windows) {
    return mismatch("windows per epoch", absl::StrCat(saved.windows),
                    absl::StrCat(current.windows));
  }
  if (saved.shuffle != current.shuffle) {
    return mismatch("shuffle", saved.shuffle ? "true" : "false",
                    current.shuffle ? "true" : "false");
  }
  return absl::OkStatus();
}

}  // namespace slidedp
