// Tokenizer: see tokenizer.h.
#include "runtime/data/tokenizer/tokenizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <deque>
#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

using nlohmann::json;

// tokenizer.json of the largest vocabularies is some 20 MB.
constexpr size_t kMaxTokenizerBytes = size_t{256} << 20;

bool IsWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Rust's `char::is_alphanumeric() || c == '_'`, the word test of single_word tokens.
bool IsWordChar(char32_t c) {
  if (c == '_') return true;
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// The code point that ends just before byte `end` of `s`.
char32_t PrevCodePoint(absl::string_view s, size_t end, size_t* start) {
  size_t i = end;
  do {
    --i;
  } while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80);
  *start = i;
  size_t j = i;
  return NextCodePoint(s, &j);
}

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

absl::Status Invalid(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(EchoPath(source), ": ", what));
}

// NFC composition of `text` into *out; false (and *out untouched) when it changes
// nothing or the text is not valid UTF-8 (then it is left as it is).
bool Nfc(absl::string_view text, std::string* out) {
  bool ascii = true;
  for (unsigned char c : text) ascii = ascii && c < 0x80;
  if (ascii) return false;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return false;
  out->assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return true;
}

// A Replace step's pattern: only {"String": ...} (a Regex pattern is refused).
absl::StatusOr<std::string> ReplacePattern(const json& step, const char* where) {
  const json& pat = step.at("pattern");
  if (pat.is_object() && pat.contains("String")) return pat.at("String").get<std::string>();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s Replace: only a String pattern is supported (not %s)", where,
      Echo(pat.dump(), 100)));
}

}  // namespace

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::string file = path;
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) file = path + "/tokenizer.json";
  // Never blocks, regular files only, inside the read roots (runtime/io/file_access.h).
  absl::StatusOr<std::string> text = ReadRegularFile(file, kMaxTokenizerBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("cannot read the tokenizer: ", text.status().message()));
  }
  return FromJson(*text, file);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view json_text,
                                                               const std::string& source) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->source_ = source;
  t->fingerprint_ = Fnv1a(json_text);
  absl::Status s = t->Parse(json_text);
  if (!s.ok()) return s;
  return t;
}

absl::Status Tokenizer::ParseNormalizer(const json& n) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& step : n.at("normalizers")) {
      absl::Status s = ParseNormalizer(step);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "NFC") {
    normalizer_.push_back(NormalizerStep{NormalizerStep::kNfc, "", ""});
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    normalizer_.push_back(
        NormalizerStep{NormalizerStep::kPrepend, "", n.at("prepend").get<std::string>()});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    absl::StatusOr<std::string> pattern = ReplacePattern(n, "normalizer");
    if (!pattern.ok()) return pattern.status();
    if (pattern->empty()) return absl::InvalidArgumentError("normalizer Replace: empty pattern");
    normalizer_.push_back(NormalizerStep{NormalizerStep::kReplace, *std::move(pattern),
                                         n.at("content").get<std::string>()});
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "normalizer type \"%s\" is not supported (null, NFC, Prepend, Replace, Sequence)",
      Echo(type)));
}

absl::Status Tokenizer::ParseDecoder(const json& d) {
  if (d.is_null()) return absl::OkStatus();
  has_decoder_ = true;
  const std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (const json& step : d.at("decoders")) {
      absl::Status s = ParseDecoder(step);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  DecoderStep step;
  if (type == "ByteLevel") {
    if (!bpe_->byte_level()) {
      return absl::InvalidArgumentError("decoder ByteLevel without a ByteLevel pre-tokenizer");
    }
    return absl::OkStatus();  // tokens are raw bytes already
  } else if (type == "Replace") {
    absl::StatusOr<std::string> pattern = ReplacePattern(d, "decoder");
    if (!pattern.ok()) return pattern.status();
    step.kind = DecoderStep::kReplace;
    step.pattern = *std::move(pattern);
    step.content = d.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::kStrip;
    step.content = d.at("content").get<std::string>();
    step.start = d.value("start", 0);
    step.stop = d.value("stop", 0);
  } else if (type == "Metaspace") {
    absl::StatusOr<Metaspace> m = Metaspace::FromJson(d);
    if (!m.ok()) return m.status();
    step.kind = DecoderStep::kMetaspace;
    step.pattern = m->replacement;
    step.start = m->prepend != Metaspace::Prepend::kNever;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "decoder type \"%s\" is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, "
        "Metaspace, Sequence)", Echo(type)));
  }
  if (bpe_->byte_level()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "decoder type \"%s\" with a ByteLevel pre-tokenizer is not supported", Echo(type)));
  }
  decoder_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status Tokenizer::Parse(absl::string_view json_text) {
  // Deep nesting would exhaust the stack (the normalizer walk below recurses, and so
  // do parts of the JSON library).
  if (const int line = JsonNestingExceeded(std::string_view(json_text.data(), json_text.size()), kMaxJsonNesting); line != 0) {
    return Invalid(source_, absl::StrCat("line ", line, ": JSON nested deeper than ",
                                         kMaxJsonNesting, " levels"));
  }
  json j;
  try {
    j = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return Invalid(source_, absl::StrCat("not valid JSON (", Echo(e.what(), 400), ")"));
  }
  try {
    absl::Status norm = ParseNormalizer(j.value("normalizer", json()));
    if (!norm.ok()) return Invalid(source_, std::string(norm.message()));

    absl::StatusOr<std::unique_ptr<PreTokenizer>> pre =
        PreTokenizer::FromJson(j.value("pre_tokenizer", json()));
    if (!pre.ok()) return Invalid(source_, std::string(pre.status().message()));
    pre_ = *std::move(pre);

    // Without a ByteLevel step the vocabulary is plain text (SentencePiece-style).
    absl::StatusOr<BytePairEncoding> bpe =
        BytePairEncoding::FromJson(j.at("model"), pre_->has_byte_level());
    if (!bpe.ok()) return Invalid(source_, std::string(bpe.status().message()));
    bpe_ = std::make_unique<BytePairEncoding>(*std::move(bpe));
    vocab_size_ = bpe_->size();

    absl::Status dec = ParseDecoder(j.value("decoder", json()));
    if (!dec.ok()) return Invalid(source_, std::string(dec.message()));

    for (const json& a : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = a.at("id").get<int32_t>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      t.normalized = a.value("normalized", !t.special);
      if (t.content.empty() || t.id < 0) {
        return Invalid(source_, absl::StrFormat("added_tokens: entry id %d is empty or negative", t.id));
      }
      any_normalized_added_ = any_normalized_added_ || t.normalized;
      first_byte_[t.normalized][static_cast<uint8_t>(t.content[0])] = true;
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{t.id} + 1);
      added_.push_back(std::move(t));
    }

    std::vector<const json*> processors;
    const json post = j.value("post_processor", json());
    if (!post.is_null()) processors.push_back(&post);
    for (size_t i = 0; i < processors.size(); ++i) {
      const json& p = *processors[i];
      const std::string type = p.value("type", "");
      if (type == "Sequence") {
        for (const json& q : p.at("processors")) processors.push_back(&q);
      } else if (type == "TemplateProcessing") {
        bool seen_a = false;
        for (const json& item : p.at("single")) {
          if (item.contains("Sequence")) {
            seen_a = true;
            continue;
          }
          const std::string name = item.at("SpecialToken").at("id").get<std::string>();
          const json& special = p.at("special_tokens").at(name);
          for (const json& id : special.at("ids")) {
            (seen_a ? suffix_ids_ : prefix_ids_).push_back(id.get<int32_t>());
          }
        }
      } else if (type != "ByteLevel") {
        return Invalid(source_, absl::StrFormat(
            "post_processor type \"%s\" is not supported (TemplateProcessing, ByteLevel, Sequence)",
            Echo(type)));
      }
    }
  } catch (const json::exception& e) {
    return Invalid(source_, absl::StrCat("unexpected structure (", Echo(e.what(), 400), ")"));
  }
  return absl::OkStatus();
}

void Tokenizer::SplitAdded(absl::string_view text, bool normalized, std::vector<Piece>* out) const {
  size_t gap = 0;  // start of the text not yet emitted
  size_t pos = 0;
  const bool* first = first_byte_[normalized];
  while (pos < text.size()) {
    if (!first[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const AddedToken* best = nullptr;
    for (const AddedToken& t : added_) {
      if (t.normalized != normalized || t.content.size() <= (best ? best->content.size() : 0)) {
        continue;
      }
      if (text.compare(pos, t.content.size(), t.content) == 0) best = &t;
    }
    if (best == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, end = pos + best->content.size();
    if (best->single_word) {
      size_t unused = 0, k = end;
      const bool left_ok = start == 0 || !IsWordChar(PrevCodePoint(text, start, &unused));
      const bool right_ok = end == text.size() || !IsWordChar(NextCodePoint(text, &k));
      if (!left_ok || !right_ok) {
        pos = end;  // non-overlapping matches: continue after this one
        continue;
      }
    }
    if (best->lstrip) {
      size_t prev = 0;
      while (start > gap && IsWhiteSpace(PrevCodePoint(text, start, &prev))) start = prev;
    }
    if (best->rstrip) {
      size_t k = end;
      while (k < text.size() && IsWhiteSpace(NextCodePoint(text, &k))) end = k;
    }
    if (start > gap) out->push_back(Piece{text.substr(gap, start - gap), -1});
    out->push_back(Piece{text.substr(start, end - start), best->id});
    gap = pos = end;
  }
  if (gap < text.size()) out->push_back(Piece{text.substr(gap), -1});
}

bool Tokenizer::Normalize(absl::string_view text, std::string* out) const {
  if (normalizer_.empty() || text.empty()) return false;
  bool changed = false;
  std::string next;
  for (const NormalizerStep& step : normalizer_) {
    const absl::string_view cur = changed ? absl::string_view(*out) : text;
    switch (step.kind) {
      case NormalizerStep::kNfc:
        if (!Nfc(cur, &next)) continue;
        break;
      case NormalizerStep::kPrepend:
        if (cur.empty()) continue;  // as Hugging Face's: nothing before nothing
        next = absl::StrCat(step.content, cur);
        break;
      case NormalizerStep::kReplace: {
        if (cur.find(step.pattern) == absl::string_view::npos) continue;
        next.clear();
        next.reserve(cur.size() + cur.size() / 4);
        size_t pos = 0;
        for (size_t at; (at = cur.find(step.pattern, pos)) != absl::string_view::npos;
             pos = at + step.pattern.size()) {
          next.append(cur.data() + pos, at - pos);
          next += step.content;
        }
        next.append(cur.data() + pos, cur.size() - pos);
        break;
      }
    }
    out->swap(next);
    changed = true;
  }
  return changed;
}

void Tokenizer::EncodeText(absl::string_view text, bool at_start, std::vector<int32_t>* out,
                           BpeCache* cache) const {
  std::vector<absl::string_view> words;
  std::deque<std::string> scratch;
  pre_->Split(text, at_start, &words, &scratch);
  for (absl::string_view w : words) bpe_->Encode(w, out, cache);
}

void Tokenizer::Encode(absl::string_view text, bool add_special_tokens, std::vector<int32_t>* out,
                       BpeCache* cache) const {
  if (add_special_tokens) out->insert(out->end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<Piece> raw;
  SplitAdded(text, /*normalized=*/false, &raw);
  std::string normalized;
  std::vector<Piece> inner;
  for (const Piece& p : raw) {
    if (p.added_id >= 0) {
      out->push_back(p.added_id);
      continue;
    }
    // Hugging Face's Metaspace "first": the piece's offset in the input is 0.
    const bool at_start = p.text.data() == text.data();
    absl::string_view body = Normalize(p.text, &normalized) ? absl::string_view(normalized) : p.text;
    if (!any_normalized_added_) {
      EncodeText(body, at_start, out, cache);
      continue;
    }
    inner.clear();
    SplitAdded(body, /*normalized=*/true, &inner);
    for (const Piece& q : inner) {
      if (q.added_id >= 0) {
        out->push_back(q.added_id);
      } else {
        EncodeText(q.text, at_start && q.text.data() == body.data(), out, cache);
      }
    }
  }
  if (add_special_tokens) out->insert(out->end(), suffix_ids_.begin(), suffix_ids_.end());
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  BpeCache cache(1024);
  Encode(text, add_special_tokens, &ids, &cache);
  return ids;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  // The tokens' texts: added tokens' contents, the model's pieces.
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const AddedToken* added = nullptr;
    for (const AddedToken& t : added_) {
      if (t.id == id) added = &t;
    }
    if (added != nullptr) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (id >= 0 && id < bpe_->size()) {
      tokens.emplace_back(bpe_->TokenBytes(id));
    }
  }
  if (bpe_->byte_level()) return absl::StrJoin(tokens, "");
  if (!has_decoder_) return absl::StrJoin(tokens, " ");  // as Hugging Face does without one
  for (const DecoderStep& step : decoder_) {
    switch (step.kind) {
      case DecoderStep::kReplace:
        for (std::string& t : tokens) t = absl::StrReplaceAll(t, {{step.pattern, step.content}});
        break;
      case DecoderStep::kByteFallback: {
        // Runs of "<0xNN>" become their bytes when those are UTF-8, else one U+FFFD each.
        std::vector<std::string> next;
        std::string run;
        size_t run_tokens = 0;
        auto flush = [&] {
          if (run_tokens == 0) return;
          if (IsValidUtf8(run)) {
            next.push_back(run);
          } else {
            for (size_t k = 0; k < run_tokens; ++k) next.push_back("\xEF\xBF\xBD");
          }
          run.clear();
          run_tokens = 0;
        };
        for (std::string& t : tokens) {
          const int b = BytePieceValue(t);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
            ++run_tokens;
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        tokens.swap(next);
        break;
      }
      case DecoderStep::kFuse:
        tokens = {absl::StrJoin(tokens, "")};
        break;
      case DecoderStep::kStrip:
        for (std::string& t : tokens) {
          int cut = 0;
          while (cut < step.start && absl::StartsWith(absl::string_view(t).substr(cut * step.content.size()), step.content)) ++cut;
          t.erase(0, cut * step.content.size());
          cut = 0;
          while (cut < step.stop && t.size() >= step.content.size() &&
                 absl::EndsWith(t, step.content)) {
            t.resize(t.size() - step.content.size());
            ++cut;
          }
        }
        break;
      case DecoderStep::kMetaspace:
        // As Hugging Face's: every replacement becomes a space, except that those of the
        // first token are dropped when a prefix was prepended.
        for (size_t k = 0; k < tokens.size(); ++k) {
          tokens[k] = absl::StrReplaceAll(tokens[k], {{step.pattern, k == 0 && step.start ? "" : " "}});
        }
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

std::optional<int32_t> Tokenizer::TokenId(absl::string_view token) const {
  for (const AddedToken& t : added_) {
    if (t.content == token) return t.id;
  }
  const int32_t id = bpe_->TokenId(token);
  if (id >= 0) return id;
  return std::nullopt;
}

}  // namespace slidedp
