// Pre-tokenization: see pretokenizer.h.
#include "runtime/data/tokenizer/pretokenizer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "re2/re2.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

using nlohmann::json;

// Unicode White_Space, which is what Oniguruma's \s matches in UTF-8 mode.
constexpr char kWhiteSpace[] =
    "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// The same set as code points, for a quick test of a match.
bool IsWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool AllWhiteSpace(absl::string_view s);  // below NextCodePoint

// GPT-2's pattern, which ByteLevel applies itself when use_regex is true.
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

constexpr absl::string_view kLookahead = "\\s+(?!\\S)";

// Translates a pattern without lookaround: \s, \S and \d spelled out.
absl::StatusOr<std::string> TranslatePlain(absl::string_view p) {
  for (absl::string_view look : {"(?=", "(?!", "(?<=", "(?<!"}) {
    if (p.find(look) != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pre-tokenizer pattern: lookaround \"", look,
          "\" is not supported (only \\s+(?!\\S) followed by |\\s+ is)"));
    }
  }
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        absl::StrAppend(&out, in_class ? "" : "[", kWhiteSpace, in_class ? "" : "]");
      } else if (e == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(
              "pre-tokenizer pattern: \\S inside a character class is not supported");
        }
        absl::StrAppend(&out, "[^", kWhiteSpace, "]");
      } else if (e == 'd') {
        out += "\\p{Nd}";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

}  // namespace

absl::StatusOr<TranslatedPattern> TranslateOnigurumaPattern(absl::string_view pattern) {
  TranslatedPattern t;
  const size_t at = pattern.find(kLookahead);
  if (at == absl::string_view::npos) {
    absl::StatusOr<std::string> plain = TranslatePlain(pattern);
    if (!plain.ok()) return plain.status();
    t.re2 = *std::move(plain);
    return t;
  }
  absl::string_view before = pattern.substr(0, at);
  absl::string_view after = pattern.substr(at + kLookahead.size());
  // The shortened match relies on the next alternative taking a lone space that the
  // lookahead rejects, as `\s+` does.
  if (!absl::StartsWith(after, "|\\s+") || (!before.empty() && before.back() != '|')) {
    return absl::InvalidArgumentError(
        "pre-tokenizer pattern: \\s+(?!\\S) must be a whole alternative followed by |\\s+");
  }
  absl::StatusOr<std::string> b = TranslatePlain(before);
  if (!b.ok()) return b.status();
  absl::StatusOr<std::string> a = TranslatePlain(after);
  if (!a.ok()) return a.status();
  t.re2 = absl::StrCat(*b, "(?P<", kLookaheadGroup, ">[", kWhiteSpace, "]+)", *a);
  t.whitespace_lookahead = true;
  return t;
}

char32_t NextCodePoint(absl::string_view s, size_t* i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(*i);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || *i + len > s.size()) {
    ++*i;
    return 0xFFFD;
  }
  char32_t cp = len == 1 ? c : c & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    if ((b(*i + k) & 0xC0) != 0x80) {
      ++*i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b(*i + k) & 0x3F);
  }
  *i += len;
  return cp;
}

namespace {
bool AllWhiteSpace(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (!IsWhiteSpace(NextCodePoint(s, &i))) return false;
  }
  return true;
}
}  // namespace

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(absl::string_view onig_pattern,
                                                                     bool remove_matches) {
  absl::StatusOr<TranslatedPattern> t = TranslateOnigurumaPattern(onig_pattern);
  if (!t.ok()) return t.status();
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  RE2::Options options;
  options.set_log_errors(false);
  s->re_ = std::make_unique<re2::RE2>(t->re2, options);
  if (!s->re_->ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pre-tokenizer pattern \"%s\": RE2 rejects its translation: %s", Echo(std::string_view(onig_pattern.data(), onig_pattern.size())),
        Echo(s->re_->error())));
  }
  if (t->whitespace_lookahead) {
    s->lookahead_group_ = s->re_->NamedCapturingGroups().at(kLookaheadGroup);
    if (s->lookahead_group_ >= 16) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pre-tokenizer pattern \"%s\": more than 15 capture groups", Echo(std::string_view(onig_pattern.data(), onig_pattern.size()))));
    }
  }
  s->remove_matches_ = remove_matches;
  return s;
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::Split(absl::string_view text, std::vector<absl::string_view>* out) const {
  re2::StringPiece m[16];  // RE2 of Debian 12 predates its absl::string_view API
  const re2::StringPiece whole(text.data(), text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    // The match's bounds alone: RE2's DFA finds them several times faster than a search
    // with submatches, which only a match of nothing but whitespace needs (below).
    if (!re_->Match(whole, pos, text.size(), RE2::UNANCHORED, m, 1)) break;
    size_t start = m[0].data() - text.data();
    size_t end = start + m[0].size();
    bool lookahead = false;  // the match is the `\s+(?!\S)` alternative's
    if (lookahead_group_ > 0 && end > start && end < text.size() &&
        AllWhiteSpace(text.substr(start, end - start))) {
      re2::StringPiece g[16];
      lookahead = re_->Match(whole, start, text.size(), RE2::ANCHOR_START, g, lookahead_group_ + 1) &&
                  g[lookahead_group_].data() != nullptr;
    }
    if (end == start) {  // an empty match: step over one character, as the splitter does
      size_t next = start;
      NextCodePoint(text, &next);
      if (start > pos && !remove_matches_) out->push_back(text.substr(pos, start - pos));
      if (!remove_matches_) out->push_back(text.substr(start, next - start));
      pos = next;
      continue;
    }
    if (lookahead) {
      // \s+(?!\S) before a non-space: give the last whitespace character back, unless
      // it is the only one (then `\s+`, the next alternative, takes it: the same piece).
      size_t last = start, k = start;
      int chars = 0;
      while (k < end) {
        last = k;
        NextCodePoint(text, &k);
        ++chars;
      }
      if (chars >= 2) end = last;
    }
    if (start > pos) out->push_back(text.substr(pos, start - pos));
    if (!remove_matches_) out->push_back(text.substr(start, end - start));
    pos = end;
  }
  if (pos < text.size()) out->push_back(text.substr(pos));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const json& config) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  if (!config.is_null()) {
    absl::Status s = p->Add(config);
    if (!s.ok()) return s;
  }
  if (p->metaspace_ && !p->steps_.empty()) {
    return absl::InvalidArgumentError(
        "pre_tokenizer: Metaspace together with other steps is not supported (Metaspace alone)");
  }
  return p;
}

PreTokenizer::~PreTokenizer() = default;

absl::Status PreTokenizer::Add(const json& step) {
  if (!step.is_object() || !step.contains("type")) {
    return absl::InvalidArgumentError("pre_tokenizer: a step without \"type\"");
  }
  const std::string type = step.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& s : step.at("pretokenizers")) {
      absl::Status st = Add(s);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    const json& pat = step.at("pattern");
    std::string onig;
    if (pat.contains("Regex")) {
      onig = pat.at("Regex").get<std::string>();
    } else if (pat.contains("String")) {
      onig = RE2::QuoteMeta(pat.at("String").get<std::string>());
    } else {
      return absl::InvalidArgumentError("pre_tokenizer Split: pattern is neither Regex nor String");
    }
    const std::string behavior = step.value("behavior", "Isolated");
    if (behavior != "Isolated" && behavior != "Removed") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pre_tokenizer Split: behavior \"%s\" is not supported (Isolated, Removed)", Echo(behavior)));
    }
    if (step.value("invert", false)) {
      return absl::InvalidArgumentError("pre_tokenizer Split: invert is not supported");
    }
    absl::StatusOr<std::unique_ptr<RegexSplitter>> r =
        RegexSplitter::Create(onig, behavior == "Removed");
    if (!r.ok()) return r.status();
    steps_.push_back(Step{*std::move(r), false});
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    has_byte_level_ = true;
    Step s;
    s.add_prefix_space = step.value("add_prefix_space", false);
    if (step.value("use_regex", true)) {
      absl::StatusOr<std::unique_ptr<RegexSplitter>> r = RegexSplitter::Create(kGpt2Pattern, false);
      if (!r.ok()) return r.status();
      s.splitter = *std::move(r);
    }
    if (s.splitter || s.add_prefix_space) steps_.push_back(std::move(s));
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    if (metaspace_) return absl::InvalidArgumentError("pre_tokenizer: two Metaspace steps");
    absl::StatusOr<Metaspace> m = Metaspace::FromJson(step);
    if (!m.ok()) return m.status();
    metaspace_ = std::make_unique<Metaspace>(*std::move(m));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "pre_tokenizer type \"%s\" is not supported (Sequence, Split, ByteLevel, Metaspace)",
      Echo(type)));
}

absl::StatusOr<Metaspace> Metaspace::FromJson(const json& step) {
  Metaspace m;
  m.replacement = step.value("replacement", std::string("\u2581"));
  size_t len = 0;
  if (!m.replacement.empty()) NextCodePoint(m.replacement, &len);
  if (m.replacement.empty() || len != m.replacement.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pre_tokenizer Metaspace: replacement \"%s\" is not one character", Echo(m.replacement)));
  }
  m.split = step.value("split", true);
  // Files written before prepend_scheme existed say add_prefix_space; false means never.
  const json scheme = step.value("prepend_scheme", json());
  if (step.contains("add_prefix_space") && step.at("add_prefix_space").is_boolean() &&
      !step.at("add_prefix_space").get<bool>()) {
    m.prepend = Prepend::kNever;
  } else if (scheme.is_null()) {
    m.prepend = Prepend::kAlways;
  } else {
    const std::string s = scheme.get<std::string>();
    if (s == "always") {
      m.prepend = Prepend::kAlways;
    } else if (s == "first") {
      m.prepend = Prepend::kFirst;
    } else if (s == "never") {
      m.prepend = Prepend::kNever;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pre_tokenizer Metaspace: prepend_scheme \"%s\" is not one of always, first, never",
          Echo(s)));
    }
  }
  return m;
}

void Metaspace::Split(absl::string_view text, bool at_start, std::vector<absl::string_view>* out,
                      std::deque<std::string>* scratch) const {
  if (text.empty()) return;
  std::string& s = scratch->emplace_back();
  s.reserve(text.size() + 8);
  const bool add = prepend == Prepend::kAlways || (prepend == Prepend::kFirst && at_start);
  if (add && !absl::StartsWith(text, replacement) && text[0] != ' ') s += replacement;
  for (char c : text) {
    if (c == ' ') {
      s += replacement;
    } else {
      s += c;
    }
  }
  const absl::string_view all = s;
  if (!split) {
    out->push_back(all);
    return;
  }
  // MergedWithNext, as Hugging Face folds it from the end: a replacement directly
  // followed by other text joins that text; one followed by another replacement, or
  // ending the text, is a piece of its own.
  std::vector<absl::string_view> pieces;  // in reverse order
  size_t end = all.size();                // the text after `end` is emitted
  size_t i = all.size();
  while (i > 0) {
    size_t start = i;
    do {
      --start;
    } while (start > 0 && (static_cast<uint8_t>(all[start]) & 0xC0) == 0x80);
    if (i - start == replacement.size() && all.compare(start, i - start, replacement) == 0) {
      // With the text after it, or alone (end == i) when a replacement or nothing follows.
      pieces.push_back(all.substr(start, end - start));
      end = start;
    }
    i = start;
  }
  if (end > 0) pieces.push_back(all.substr(0, end));
  out->insert(out->end(), pieces.rbegin(), pieces.rend());
}

void PreTokenizer::Split(absl::string_view text, bool at_start, std::vector<absl::string_view>* out,
                         std::deque<std::string>* scratch) const {
  if (metaspace_) {
    metaspace_->Split(text, at_start, out, scratch);
    return;
  }
  if (steps_.empty()) {
    if (!text.empty()) out->push_back(text);
    return;
  }
  std::vector<absl::string_view> pieces{text}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (absl::string_view piece : pieces) {
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
        scratch->push_back(absl::StrCat(" ", piece));
        piece = scratch->back();
      }
      if (step.splitter) {
        step.splitter->Split(piece, &next);
      } else if (!piece.empty()) {
        next.push_back(piece);
      }
    }
    pieces.swap(next);
  }
  out->insert(out->end(), pieces.begin(), pieces.end());
}

namespace {

struct ByteTables {
  int to_cp[256];
  int to_byte[324];  // code points below 324 (the table's largest is 323)
  ByteTables() {
    for (int& b : to_byte) b = -1;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      to_cp[b] = printable ? b : 256 + n++;
      to_byte[to_cp[b]] = b;
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables* t = new ByteTables();
  return *t;
}

}  // namespace

int ByteLevelCodePoint(uint8_t b) { return Tables().to_cp[b]; }

int ByteLevelByte(char32_t cp) { return cp < 324 ? Tables().to_byte[cp] : -1; }

}  // namespace slidedp
