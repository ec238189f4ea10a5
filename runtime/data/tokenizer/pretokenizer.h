// Pre-tokenization of a byte-level BPE tokenizer: the Split regex of tokenizer.json
// (an Oniguruma pattern, as Hugging Face tokenizers runs it) translated to RE2, and the
// ByteLevel step. RE2 has no lookahead and its \s is ASCII, so the translation (1)
// spells \s and \S as the Unicode White_Space set Oniguruma uses, and (2) turns the
// GPT-2 family's `\s+(?!\S)|\s+` into a captured `\s+` whose match is shortened by one
// character when a non-space follows, which is exactly what the backtracking lookahead
// yields. Any other lookaround is refused at load. Immutable after construction; safe
// to use from any number of threads at once.
// Also the Metaspace pre-tokenizer of SentencePiece-style tokenizers (Mistral's and
// newer Llama 2 conversions): spaces become "\u2581", one is prepended (prepend_scheme
// always, or first: only to the piece at the start of the input), and with split the
// text is cut before each "\u2581" that starts a word (Hugging Face's MergedWithNext).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace re2 {
class RE2;
}

namespace slidedp {

// An Oniguruma pattern as RE2 understands it; with `whitespace_lookahead`, the capture
// group named kLookaheadGroup stands for `\s+(?!\S)`.
inline constexpr char kLookaheadGroup[] = "slidedp_ws_lookahead";

struct TranslatedPattern {
  std::string re2;
  bool whitespace_lookahead = false;
};

// InvalidArgument naming the construct for lookaround other than `\s+(?!\S)|\s+`, or \S
// inside a character class.
absl::StatusOr<TranslatedPattern> TranslateOnigurumaPattern(absl::string_view pattern);

// Splits text into pieces the way a Split pre-tokenizer with behavior "Isolated" (or
// "Removed") does: matches and the gaps between them, in order, none empty.
class RegexSplitter {
 public:
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(absl::string_view onig_pattern,
                                                               bool remove_matches);
  ~RegexSplitter();

  // Appends the pieces of `text` (views into it) to `out`.
  void Split(absl::string_view text, std::vector<absl::string_view>* out) const;

 private:
  RegexSplitter() = default;
  std::unique_ptr<re2::RE2> re_;
  int lookahead_group_ = -1;  // capture index of the `\s+(?!\S)` group, -1 if none
  bool remove_matches_ = false;
};

// Hugging Face's Metaspace pre-tokenizer on one piece of text.
struct Metaspace {
  enum class Prepend { kAlways, kFirst, kNever };
  std::string replacement = "\u2581";
  Prepend prepend = Prepend::kAlways;
  bool split = true;

  // InvalidArgument naming the field for a bad replacement or prepend_scheme.
  static absl::StatusOr<Metaspace> FromJson(const nlohmann::json& step);
  // Appends the pieces of `text` (`at_start`: it begins the input, for kFirst) to `out`,
  // as views into a string it appends to `*scratch`.
  void Split(absl::string_view text, bool at_start, std::vector<absl::string_view>* out,
             std::deque<std::string>* scratch) const;
};

// The pre-tokenizer chain of tokenizer.json ("pre_tokenizer"): Sequence, Split and
// ByteLevel steps, or a Metaspace step alone. A byte-level BPE needs a ByteLevel step.
class PreTokenizer {
 public:
  // InvalidArgument naming the unsupported type, behavior or pattern.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& config);
  ~PreTokenizer();

  // Appends the pieces of `text` to `out`; `at_start` says that `text` begins the input
  // (it matters to Metaspace's prepend_scheme "first" only). Pieces are views into `text`
  // unless a ByteLevel step adds a prefix space or a Metaspace step rewrites it; then they
  // are views into `*scratch`, which the caller keeps alive (and must not reuse) while it
  // uses the pieces.
  void Split(absl::string_view text, bool at_start, std::vector<absl::string_view>* out,
             std::deque<std::string>* scratch) const;

  bool has_byte_level() const { return has_byte_level_; }

 private:
  PreTokenizer() = default;
  absl::Status Add(const nlohmann::json& step);

  struct Step {
    std::unique_ptr<RegexSplitter> splitter;  // null for a ByteLevel without use_regex
    bool add_prefix_space = false;
  };
  std::vector<Step> steps_;
  bool has_byte_level_ = false;
  std::unique_ptr<Metaspace> metaspace_;  // the only step when set
};

// GPT-2's byte-to-unicode table: byte b's stand-in character, and the inverse (code
// point -> byte, or -1 for a code point that stands for no byte).
int ByteLevelCodePoint(uint8_t b);
int ByteLevelByte(char32_t code_point);

// Reads one UTF-8 character at `s[i]` (advancing i); invalid bytes read as U+FFFD.
char32_t NextCodePoint(absl::string_view s, size_t* i);

}  // namespace slidedp
