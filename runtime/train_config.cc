// TrainConfig: YAML/JSON parsing and JSON output; see train_config.h. Validation is in
// train_config_validate.cc; the parser runs it and adds where the field is.
// The field list (VisitFields, train_config_fields.h) drives the YAML reader, the JSON
// writer and the "did you mean" suggestions.
// Plain functions; no threads.
#include "runtime/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"
#include "runtime/train_config_fields.h"
#include "runtime/train_config_validate.h"

namespace slidedp {
namespace {

using train_config_internal::FieldError;
using train_config_internal::FindProblem;

// Every field's full name ("optimizer.lr"), sections included.
class NameCollector {
 public:
  explicit NameCollector(bool sections, std::string prefix = "")
      : sections_(sections), prefix_(std::move(prefix)) {}
  template <typename T>
  void Field(const char* name, T&, unsigned = kNoTags) {
    names_.push_back(prefix_ + name);
  }
  template <typename T>
  void Section(const char* name, T& sub) {
    if (sections_) names_.push_back(prefix_ + name);
    NameCollector c(sections_, prefix_ + name + ".");
    VisitFields(sub, c);
    names_.insert(names_.end(), c.names_.begin(), c.names_.end());
  }
  const std::vector<std::string>& names() const { return names_; }

 private:
  bool sections_;
  std::string prefix_;
  std::vector<std::string> names_;
};

const std::vector<std::string>& AllFieldNames() {
  static const std::vector<std::string>* names = new std::vector<std::string>(TrainConfigFieldNames(true));
  return *names;
}

// (full name, value as text) of the fields carrying a tag.
class TaggedTexts {
 public:
  TaggedTexts(FieldTag tag, std::string prefix, std::vector<std::pair<std::string, std::string>>* out)
      : tag_(tag), prefix_(std::move(prefix)), out_(out) {}
  template <typename T>
  void Field(const char* name, T& value, unsigned tags = kNoTags) {
    if ((tags & tag_) != 0) out_->emplace_back(prefix_ + name, Text(value));
  }
  template <typename T>
  void Section(const char* name, T& sub) {
    TaggedTexts t(tag_, prefix_ + name + ".", out_);
    VisitFields(sub, t);
  }

 private:
  template <typename T>
  static std::string Text(const T& v) {
    if constexpr (std::is_floating_point_v<T>) {
      return absl::StrFormat("%.17g", v);
    } else if constexpr (std::is_enum_v<T>) {
      return std::string(NameOf(v));
    } else {
      return absl::StrCat(v);
    }
  }
  FieldTag tag_;
  std::string prefix_;
  std::vector<std::pair<std::string, std::string>>* out_;
};

// ---------------------------------------------------------------- suggestions

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string Leaf(const std::string& full) {
  const size_t dot = full.rfind('.');
  return dot == std::string::npos ? full : full.substr(dot + 1);
}

std::string Parent(const std::string& full) {
  const size_t dot = full.rfind('.');
  return dot == std::string::npos ? "" : full.substr(0, dot + 1);
}

// The known field the user most likely meant by the unknown `full` name, or "".
// The same name in another section wins; else the closest name in the same section.
std::string Suggest(const std::string& full) {
  const std::string leaf = Leaf(full), parent = Parent(full);
  for (const std::string& known : AllFieldNames()) {
    if (Leaf(known) == leaf && known != full) return known;
  }
  std::string best;
  size_t best_distance = std::max<size_t>(2, leaf.size() / 3) + 1;
  for (const std::string& known : AllFieldNames()) {
    if (Parent(known) != parent) continue;
    const size_t d = EditDistance(leaf, Leaf(known));
    if (d < best_distance) best_distance = d, best = known;
  }
  return best;
}

// ---------------------------------------------------------------- locations

// Where the fields of one parse came from, for messages.
struct Locations {
  std::string source;
  LineStyle style = LineStyle::kProse;
  std::map<std::string, int> lines;  // full field name -> 1-based line of its key

  // "SOURCE at line N" (or "SOURCE:N").
  std::string Place(int line) const {
    return style == LineStyle::kProse ? absl::StrCat(source, " at line ", line) : absl::StrCat(source, ":", line);
  }

  // " in SOURCE at line N" for `field`, or for its section when it is not in the file.
  std::string Where(const std::string& field) const {
    for (std::string f = field; !f.empty();) {
      auto it = lines.find(f);
      if (it != lines.end()) return absl::StrCat(" in ", Place(it->second));
      const size_t dot = f.rfind('.');
      f = dot == std::string::npos ? "" : f.substr(0, dot);
    }
    return absl::StrCat(" in ", source);
  }
};

// ---------------------------------------------------------------- YAML scalars

bool IsQuoted(const YAML::Node& n) { return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"; }

std::string Describe(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing (null)";
  if (IsQuoted(n)) return absl::StrCat("the string \"", Echo(n.Scalar()), "\"");
  return absl::StrCat("'", Echo(n.Scalar()), "'");
}

// Decoders: return "" on success, else what is wrong ("must be ..., got ...").
std::string Decode(const YAML::Node& n, std::string* out) {
  if (n.IsNull()) {
    out->clear();
    return "";
  }
  if (!n.IsScalar()) return "must be a string, got " + Describe(n);
  // Strings go on into JSON, the API's protobuf and messages, which all need UTF-8.
  if (!IsValidUtf8(n.Scalar())) return "must be UTF-8 text, got " + Describe(n);
  *out = n.Scalar();
  return "";
}

std::string Decode(const YAML::Node& n, bool* out) {
  if (!n.IsScalar() || IsQuoted(n) || !YAML::convert<bool>::decode(n, *out)) {
    return "must be true or false, got " + Describe(n);
  }
  return "";
}

std::string Decode(const YAML::Node& n, double* out) {
  if (!n.IsScalar() || IsQuoted(n) || !absl::SimpleAtod(n.Scalar(), out)) {
    return "must be a number, got " + Describe(n);
  }
  return "";
}

std::string Decode(const YAML::Node& n, int64_t* out) {
  if (n.IsScalar() && !IsQuoted(n) && absl::SimpleAtoi(n.Scalar(), out)) return "";
  double d;
  if (n.IsScalar() && !IsQuoted(n) && absl::SimpleAtod(n.Scalar(), &d)) {
    return "must be an integer, got " + Describe(n);
  }
  return "must be an integer number, got " + Describe(n);
}

std::string Decode(const YAML::Node& n, int* out) {
  int64_t wide = 0;
  std::string err = Decode(n, &wide);
  if (!err.empty()) return err;
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
    return "is out of range, got " + Describe(n);
  }
  *out = static_cast<int>(wide);
  return "";
}

std::string Decode(const YAML::Node& n, uint64_t* out) {
  if (n.IsScalar() && !IsQuoted(n) && absl::SimpleAtoi(n.Scalar(), out)) return "";
  int64_t negative;
  if (n.IsScalar() && !IsQuoted(n) && absl::SimpleAtoi(n.Scalar(), &negative)) {
    return "must be non-negative, got " + Describe(n);
  }
  return "must be a non-negative integer, got " + Describe(n);
}

// An enumeration (train_config_enums.h), by name.
template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
std::string Decode(const YAML::Node& n, E* out) {
  std::string name;
  if (std::string err = Decode(n, &name); !err.empty()) return err;
  const std::optional<E> value = EnumFromName<E>(name);
  if (!value) return absl::StrCat("must be one of ", EnumNameList<E>(), "; got '", Echo(name), "'");
  *out = *value;
  return "";
}

// ---------------------------------------------------------------- the YAML reader

// Reads the fields of one YAML map into a struct; unknown and duplicate keys are
// errors. The first error wins; later fields are skipped.
class YamlReader {
 public:
  YamlReader(const YAML::Node& map, std::string prefix, Locations* loc)
      : prefix_(std::move(prefix)), loc_(loc) {
    for (auto it = map.begin(); it != map.end() && status_.ok(); ++it)
      AddEntry(it->first, it->second);
  }

  template <typename T>
  void Field(const char* name, T& out, unsigned = kNoTags) {
    const Entry* e = Take(name);
    if (e == nullptr) return;
    const std::string err = Decode(e->value, &out);
    if (!err.empty()) status_ = FieldError(prefix_ + name, loc_->Where(prefix_ + name), err);
  }

  template <typename T>
  void Section(const char* name, T& out) {
    const Entry* e = Take(name);
    if (e == nullptr || e->value.IsNull()) return;  // an empty section keeps the defaults
    if (!e->value.IsMap()) {
      status_ = FieldError(prefix_ + name, loc_->Where(prefix_ + name),
                           "must be a map of fields, got " + Describe(e->value));
      return;
    }
    YamlReader sub(e->value, prefix_ + name + ".", loc_);
    VisitFields(out, sub);
    status_ = sub.Finish();
  }

  // The first error, or the first key that no Field/Section call asked for.
  absl::Status Finish() const {
    if (!status_.ok()) return status_;
    for (const Entry& e : entries_) {
      if (e.used) continue;
      const std::string full = prefix_ + e.name;
      std::string msg = absl::StrCat("unknown field '", Echo(full), "'", loc_->Where(full));
      const std::string hint = Suggest(full);
      if (!hint.empty()) absl::StrAppend(&msg, "; did you mean '", hint, "'?");
      return absl::InvalidArgumentError(msg);
    }
    return absl::OkStatus();
  }

 private:
  struct Entry {
    std::string name;
    YAML::Node value;
    bool used = false;
  };

  void AddEntry(const YAML::Node& key, const YAML::Node& value) {
    const int line = key.Mark().line + 1;
    if (!key.IsScalar()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "a key", prefix_.empty() ? "" : " in '" + prefix_.substr(0, prefix_.size() - 1) + "'",
          " in ", loc_->Place(line), " is not a field name"));
      return;
    }
    const std::string full = prefix_ + key.Scalar();
    auto [it, fresh] = loc_->lines.emplace(full, line);
    if (!fresh) {
      status_ = absl::InvalidArgumentError(absl::StrCat("duplicate field '", Echo(full), "' in ",
                                                        loc_->Place(line), " (first at line ", it->second, ")"));
      return;
    }
    entries_.push_back(Entry{key.Scalar(), value});
  }

  // The entry for `name`, marked used; nullptr when absent or after an error.
  const Entry* Take(const char* name) {
    if (!status_.ok()) return nullptr;
    for (Entry& e : entries_) {
      if (e.name == name) {
        e.used = true;
        return &e;
      }
    }
    return nullptr;
  }

  std::string prefix_;
  Locations* loc_;
  std::vector<Entry> entries_;  // in document order
  absl::Status status_;
};

// ---------------------------------------------------------------- the JSON writer

class JsonWriter {
 public:
  template <typename T>
  void Field(const char* name, T& value, unsigned = kNoTags) {
    if constexpr (std::is_enum_v<T>) {
      json_[name] = std::string(NameOf(value));
    } else {
      json_[name] = value;
    }
  }
  template <typename T>
  void Section(const char* name, T& sub) {
    JsonWriter w;
    VisitFields(sub, w);
    json_[name] = std::move(w.json_);
  }
  const nlohmann::ordered_json& json() const { return json_; }

 private:
  nlohmann::ordered_json json_ = nlohmann::ordered_json::object();
};

absl::StatusOr<TrainConfig> ParseYaml(std::string_view text, Locations* loc) {
  const YAML::Node root = YAML::Load(std::string(text));
  TrainConfig config;
  if (root.IsNull()) return config;  // an empty file: every default
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(loc->source, ": the top level must be a map of fields, got ", Describe(root)));
  }
  YamlReader reader(root, "", loc);
  VisitFields(config, reader);
  if (absl::Status s = reader.Finish(); !s.ok()) return s;
  return config;
}

}  // namespace

absl::StatusOr<JobFile> ParseJobFile(std::string_view text, std::string_view source, LineStyle style) {
  Locations loc;
  loc.source = EchoPath(source);
  loc.style = style;
  if (text.size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(loc.source, ": ", text.size(), " bytes, more than a job file's limit of ",
                                                   kMaxJobFileBytes));
  }
  // yaml-cpp recurses once per level of nesting: refuse absurd nesting before it parses.
  if (const int line = YamlNestingExceeded(text, kMaxYamlNesting); line != 0) {
    return absl::InvalidArgumentError(absl::StrCat(loc.Place(line), ": nested deeper than ",
                                                   kMaxYamlNesting, " levels (or too many brackets)"));
  }
  absl::StatusOr<TrainConfig> config;
  try {
    config = ParseYaml(text, &loc);
  } catch (const YAML::Exception& e) {
    const std::string where = e.mark.is_null()
                                  ? loc.source
                                  : absl::StrCat(loc.Place(e.mark.line + 1), ", column ", e.mark.column + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid YAML or JSON: ", Echo(e.msg)));
  }
  if (!config.ok()) return config.status();
  if (const std::optional<train_config_internal::Problem> p = FindProblem(*config))
    return FieldError(p->field, loc.Where(p->field), p->what);
  return JobFile{*std::move(config), std::move(loc.lines)};
}

absl::StatusOr<TrainConfig> ParseTrainConfig(std::string_view text, std::string_view source) {
  absl::StatusOr<JobFile> file = ParseJobFile(text, source, LineStyle::kProse);
  if (!file.ok()) return file.status();
  return std::move(file->config);
}

absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  // Never blocks, regular files only (runtime/io/file_access.h).
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxJobFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("config file: ", text.status().message()));
  }
  return ParseTrainConfig(*text, path);
}

std::string TrainConfigToJson(const TrainConfig& config) {
  TrainConfig copy = config;  // the visitors take mutable references
  JsonWriter writer;
  VisitFields(copy, writer);
  const std::string dumped = writer.json().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // The job-file reader counts every '[' and '{' as a level of nesting, inside strings
  // too (YamlNestingExceeded does not trust quotes); a string value with many brackets
  // (a path, a model name) would make this output unreadable by ParseTrainConfig. Inside
  // strings they are written as \u escapes, which JSON and YAML read back as the same
  // characters. The dump escapes '"' and '\\' itself, so the string state is exact.
  std::string out;
  out.reserve(dumped.size());
  bool in_string = false, escaped = false;
  for (const char c : dumped) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      } else if (c == '[' || c == '{') {
        out += c == '[' ? "\\u005b" : "\\u007b";
        continue;
      }
    } else if (c == '"') {
      in_string = true;
    }
    out += c;
  }
  return out;
}

std::vector<std::string> TrainConfigFieldNames(bool sections) {
  TrainConfig c;
  NameCollector collector(sections);
  VisitFields(c, collector);
  return collector.names();
}

std::vector<std::pair<std::string, std::string>> TaggedFieldTexts(const TrainConfig& config, FieldTag tag) {
  TrainConfig copy = config;  // the visitors take mutable references
  std::vector<std::pair<std::string, std::string>> out;
  TaggedTexts texts(tag, "", &out);
  VisitFields(copy, texts);
  return out;
}

}  // namespace slidedp
