// JSON-lines token corpora: see jsonl_tokens.h.
#include "runtime/data/jsonl_tokens.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/data/data_file_mapping.h"
#include "runtime/io/stop_token.h"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

using nlohmann::json;

absl::Status LineError(const std::string& source, int64_t line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s", EchoPath(source), line, what));
}

absl::StatusOr<json> ParseLine(absl::string_view text, const std::string& source, int64_t line) {
  // Deep nesting would exhaust the stack in the library's recursive parts (dump, below).
  if (JsonNestingExceeded(std::string_view(text.data(), text.size()), kMaxJsonNesting) != 0) {
    return LineError(source, line, absl::StrCat("JSON nested deeper than ", kMaxJsonNesting, " levels"));
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for huge numbers
    return LineError(source, line, absl::StrCat("not valid JSON (", Echo(e.what(), 400), ")"));
  }
}

// The token array of a document: the line itself or its "tokens" member.
absl::StatusOr<const json*> TokenArray(const json& doc, const std::string& source, int64_t line) {
  if (doc.is_array()) return &doc;
  if (doc.is_object()) {
    auto it = doc.find("tokens");
    if (it != doc.end() && it->is_array()) return &*it;
    return LineError(source, line, "object has no \"tokens\" array");
  }
  return LineError(source, line, "expected an array of token ids or an object {\"tokens\": [...]}");
}

absl::Status AppendTokens(const json& array, const std::string& source, int64_t line,
                          int64_t vocab_size, std::vector<int32_t>& out) {
  for (size_t i = 0; i < array.size(); ++i) {
    const json& v = array[i];
    const bool in_range =
        v.is_number_unsigned()
            ? v.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
            : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab_size;
    if (!in_range) {
      return LineError(
          source, line,
          absl::StrFormat("element %d (%s) is not a token id in [0, %d)", i,
                          Echo(v.dump(-1, ' ', false, json::error_handler_t::replace)), vocab_size));
    }
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JsonlTokens> ParseJsonlTokens(absl::string_view text, const std::string& source,
                                             int64_t vocab_size, const StopToken* stop) {
  JsonlTokens result;
  int64_t line_number = 0;
  while (!text.empty()) {
    if (StopRequested(stop)) return CheckStop(stop, absl::StrCat("reading ", source, " at line ", line_number + 1));
    ++line_number;
    const size_t end = text.find('\n');
    absl::string_view line = text.substr(0, end);
    text.remove_prefix(end == absl::string_view::npos ? text.size() : end + 1);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    absl::StatusOr<json> doc = ParseLine(line, source, line_number);
    if (!doc.ok()) return doc.status();
    absl::StatusOr<const json*> array = TokenArray(*doc, source, line_number);
    if (!array.ok()) return array.status();
    result.document_starts.push_back(static_cast<int64_t>(result.tokens.size()));
    absl::Status s = AppendTokens(**array, source, line_number, vocab_size, result.tokens);
    if (!s.ok()) return s;
    ++result.documents;
  }
  return result;
}

absl::StatusOr<std::unique_ptr<TokenSource>> LoadJsonlTokens(const std::string& path,
                                                             int64_t vocab_size, const StopToken* stop) {
  absl::StatusOr<std::unique_ptr<DataFileMapping>> file = DataFileMapping::Open(path);
  if (!file.ok()) return file.status();
  absl::string_view text(reinterpret_cast<const char*>((*file)->data()), (*file)->size());
  absl::StatusOr<JsonlTokens> parsed = ParseJsonlTokens(text, path, vocab_size, stop);
  if (!parsed.ok()) return parsed.status();
  if (parsed->tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the file holds no tokens", EchoPath(path)));
  }
  std::string description =
      absl::StrFormat("jsonl %s (%s tokens in %d documents)", path,
                      FormatTokenCount(parsed->tokens.size()), parsed->documents);
  std::vector<uint8_t> flags(parsed->tokens.size(), kTokenLoss);
  for (int64_t start : parsed->document_starts) {
    if (start < static_cast<int64_t>(flags.size())) flags[start] |= kTokenDocumentStart;
  }
  return std::unique_ptr<TokenSource>(new InMemoryTokenSource(
      std::move(parsed->tokens), std::move(description), std::move(flags)));
}

}  // namespace slidedp
