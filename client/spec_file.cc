// Job spec files: the job-file parser that slidedp-train uses (runtime/train_config.h,
// ParseJobFile, with "FILE:LINE" in messages), then the fields the file sets, as a
// JobSpec, by the field-list translation (server/spec_fields.h). Stateless; any thread.
#include "client/spec_file.h"

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"
#include "runtime/train_config.h"
#include "server/spec_fields.h"

namespace slidedp::client {

namespace {

// The API carries text as UTF-8 (proto3 strings): 0, or the first line that is not.
int FirstLineNotUtf8(std::string_view text) {
  int line = 1;
  for (size_t begin = 0; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    if (!IsValidUtf8(text.substr(begin, end - begin))) return line;
    begin = end + 1;
  }
  return 0;
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source) {
  const std::string_view name(source.data(), source.size());
  if (text.size() <= kMaxJobFileBytes) {
    if (const int line = FirstLineNotUtf8(std::string_view(text.data(), text.size())); line != 0) {
      return absl::InvalidArgumentError(absl::StrCat(EchoPath(name), ":", line, ": not UTF-8 text"));
    }
  }
  absl::StatusOr<JobFile> file =
      ParseJobFile(std::string_view(text.data(), text.size()), name, LineStyle::kFileColonLine);
  if (!file.ok()) return file.status();
  for (const server::FieldNotInSpec& f : server::kFieldsNotInJobSpec) {
    auto it = file->lines.find(f.name);
    if (it == file->lines.end()) continue;
    return absl::InvalidArgumentError(absl::StrCat(EchoPath(name), ":", it->second, ": ", f.name,
                                                   ": not a field of daemon jobs (", f.why, ")"));
  }
  // Only the fields the file sets: the daemon applies the defaults of the others.
  return server::ConfigToSpec(file->config, &file->lines);
}

absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path) {
  // Never blocks (a FIFO, /dev/stdin), regular files of a job file's size only.
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxJobFileBytes);
  if (!text.ok()) return text.status();
  return ParseJobSpec(*text, path);
}

}  // namespace slidedp::client
