// Tokenizer tests: the pre-tokenizer's RE2 translation (lookahead, Unicode \s) on known
// splits, BPE merge order on a hand-made tokenizer.json, added tokens, NFC, the
// template, SentencePiece-style BPE (Prepend/Replace, Metaspace, byte fallback, unknown
// pieces, decoders) on hand-made files, and the ids of the fixtures made with the Hugging
// Face tokenizers package (tests/reference/make_tokenizer_fixtures.py) for Qwen2- and
// Llama-3-style files, a real Llama-2-format file (Mistral 7B's vocabulary) and
// stories260K's (tests/reference/fixtures/stories260k/model, from ../shared/models).
#include "runtime/data/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/data/tokenizer/pretokenizer.h"

namespace slidedp {
namespace {

using nlohmann::json;

constexpr char kQwen2Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kLlama3Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::vector<std::string> SplitWith(const char* pattern, const std::string& text) {
  auto splitter = RegexSplitter::Create(pattern, false);
  EXPECT_TRUE(splitter.ok()) << splitter.status();
  std::vector<absl::string_view> pieces;
  (*splitter)->Split(text, &pieces);
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

using Pieces = std::vector<std::string>;

TEST(RegexSplitter, WordsPunctuationAndContractions) {
  EXPECT_EQ(SplitWith(kQwen2Pattern, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "I'm don't"), (Pieces{"I", "'m", " don", "'t"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "YOU'LL"), (Pieces{"YOU", "'LL"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "hello!!!\nx"), (Pieces{"hello", "!!!\n", "x"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "(a)"), (Pieces{"(a", ")"}));
}

TEST(RegexSplitter, DigitsOneOrThree) {
  EXPECT_EQ(SplitWith(kQwen2Pattern, "12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(SplitWith(kLlama3Pattern, "12345"), (Pieces{"123", "45"}));
}

// `\s+(?!\S)`: a whitespace run before a word gives its last character to the word.
TEST(RegexSplitter, WhitespaceLookahead) {
  EXPECT_EQ(SplitWith(kQwen2Pattern, "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "a     b"), (Pieces{"a", "    ", " b"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "\t\tfoo"), (Pieces{"\t", "\tfoo"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "a \n\n b"), (Pieces{"a", " \n\n", " b"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "a  1"), (Pieces{"a", " ", " ", "1"}));
}

// Oniguruma's \s is Unicode White_Space; RE2's would be ASCII only.
TEST(RegexSplitter, UnicodeWhitespace) {
  EXPECT_EQ(SplitWith(kQwen2Pattern, "a\u00a0\u00a0b"), (Pieces{"a", "\u00a0", "\u00a0b"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "x\u3000\u3000"), (Pieces{"x", "\u3000\u3000"}));
}

TEST(RegexSplitter, RefusesOtherLookaround) {
  EXPECT_FALSE(RegexSplitter::Create("a(?=b)", false).ok());
  EXPECT_FALSE(RegexSplitter::Create("(?<!a)b", false).ok());
  EXPECT_FALSE(RegexSplitter::Create("\\s+(?!\\S)", false).ok());  // no |\s+ after it
}

TEST(ByteLevel, TableIsGpt2s) {
  EXPECT_EQ(ByteLevelCodePoint('A'), 'A');
  EXPECT_EQ(ByteLevelCodePoint(' '), 0x120);   // Ġ
  EXPECT_EQ(ByteLevelCodePoint('\n'), 0x10A);  // Ċ
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ByteLevelByte(ByteLevelCodePoint(b)), b);
}

// The byte-level spelling of raw bytes, as vocabulary keys are written.
std::string ByteLevel(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) {
    const int cp = ByteLevelCodePoint(c);
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// A tiny Qwen2-shaped tokenizer.json: 256 byte tokens, then merges in rank order.
json TinyTokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges, bool nfc) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevel(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(ByteLevel(a + b))) vocab[ByteLevel(a + b)] = next++;
    merge_list.push_back(ByteLevel(a) + " " + ByteLevel(b));
  }
  json j;
  j["normalizer"] = nfc ? json{{"type", "NFC"}} : json();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Pattern}}}, {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list},
                {"ignore_merges", ignore_merges}};
  j["added_tokens"] = {{{"id", next}, {"content", "<|im_end|>"}, {"special", true},
                        {"normalized", false}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {next}}}}}}};
  return j;
}

std::unique_ptr<Tokenizer> Make(const json& j) {
  auto t = Tokenizer::FromJson(j.dump(), "tiny");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(Tokenizer, MergesLowestRankFirstLeftmostOnTies) {
  // ranks: (b,c)=0 -> 256, (a,b)=1 -> 257, (a,bc)=2 -> 258
  auto t = Make(TinyTokenizer({{"b", "c"}, {"a", "b"}, {"a", "bc"}}, false, false));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("abc"), (std::vector<int32_t>{258}));           // bc first, then a+bc
  EXPECT_EQ(t->Encode("ab"), (std::vector<int32_t>{257}));
  EXPECT_EQ(t->Encode("abab"), (std::vector<int32_t>{257, 257}));
  EXPECT_EQ(t->Encode("x"), (std::vector<int32_t>{'x'}));
  EXPECT_EQ(t->Decode(t->Encode("abc ab")), "abc ab");
}

TEST(Tokenizer, OverlappingPairsMergeLeftFirst) {
  auto t = Make(TinyTokenizer({{"a", "a"}}, false, false));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("aaa"), (std::vector<int32_t>{256, 'a'}));
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordFromVocab) {
  // "abc" is in the vocabulary via (ab, c), but the merges alone reach it another way.
  auto merges = std::vector<std::pair<std::string, std::string>>{{"b", "c"}, {"ab", "c"}, {"a", "b"}};
  auto without = Make(TinyTokenizer(merges, false, false));
  auto with = Make(TinyTokenizer(merges, true, false));
  ASSERT_NE(without, nullptr);
  ASSERT_NE(with, nullptr);
  // Without: bc (256) first, then a + bc has no merge -> [a, bc].
  EXPECT_EQ(without->Encode("abc"), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(with->Encode("abc"), (std::vector<int32_t>{*with->TokenId("abc")}));
}

TEST(Tokenizer, AddedTokensSplitFirstAndTemplateAddsPrefix) {
  auto t = Make(TinyTokenizer({{"a", "b"}}, false, false));
  ASSERT_NE(t, nullptr);
  const int32_t end = *t->TokenId("<|im_end|>");
  EXPECT_EQ(t->Encode("ab<|im_end|>ab"), (std::vector<int32_t>{256, end, 256}));
  EXPECT_EQ(t->Encode("ab", true), (std::vector<int32_t>{end, 256}));
  EXPECT_EQ(t->Decode({end, 256}, /*skip_special_tokens=*/true), "ab");
  EXPECT_EQ(t->vocab_size(), end + 1);
}

TEST(Tokenizer, NfcComposesBeforeBpe) {
  auto nfc = Make(TinyTokenizer({}, false, true));
  auto raw = Make(TinyTokenizer({}, false, false));
  ASSERT_NE(nfc, nullptr);
  ASSERT_NE(raw, nullptr);
  const std::string decomposed = "e\xcc\x81";  // e + COMBINING ACUTE
  EXPECT_EQ(nfc->Encode(decomposed), (std::vector<int32_t>{0xC3, 0xA9}));  // é
  EXPECT_EQ(raw->Encode(decomposed), (std::vector<int32_t>{'e', 0xCC, 0x81}));
}

TEST(Tokenizer, RejectsWhatItCannotRun) {
  json j = TinyTokenizer({}, false, false);
  j["normalizer"] = {{"type", "Lowercase"}};
  auto t = Tokenizer::FromJson(j.dump(), "x.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("Lowercase"), std::string::npos) << t.status();
  j = TinyTokenizer({}, false, false);
  j["model"]["merges"].push_back("q z");  // "qz" is not in the vocabulary
  EXPECT_FALSE(Tokenizer::FromJson(j.dump(), "x.json").ok());
  EXPECT_FALSE(Tokenizer::FromJson("{", "x.json").ok());
}

// A tiny Llama-2-shaped tokenizer.json: <unk> <s> </s>, the 256 byte pieces, then
// `pieces`; merges in rank order; the Prepend/Replace normalizers (or, with
// `metaspace`, that pre-tokenizer) and Llama 2's decoder.
json TinySentencePiece(const std::vector<std::string>& pieces,
                       const std::vector<std::pair<std::string, std::string>>& merges,
                       bool byte_fallback, bool fuse_unk, const json& metaspace = json()) {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  int next = 259;
  for (const std::string& p : pieces) vocab[p] = next++;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(json::array({a, b}));
  json j;
  if (metaspace.is_null()) {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
    j["pre_tokenizer"] = nullptr;
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  } else {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = metaspace;
    j["decoder"] = metaspace;
  }
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list},
                {"unk_token", "<unk>"}, {"byte_fallback", byte_fallback}, {"fuse_unk", fuse_unk}};
  j["added_tokens"] = json::array();
  for (int id = 0; id < 3; ++id) {
    j["added_tokens"].push_back({{"id", id}, {"content", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"},
                                 {"special", true}, {"normalized", false}});
  }
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}}}}}};
  return j;
}

using Ids = std::vector<int32_t>;
constexpr int32_t kByte0 = 3;  // id of <0x00> in TinySentencePiece

TEST(SentencePieceBpe, PrependReplaceThenMergesByRank) {
  auto t = Make(TinySentencePiece({"\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"},
                                  {{"\u2581", "a"}, {"a", "b"}, {"\u2581a", "b"}}, true, true));
  ASSERT_NE(t, nullptr);
  const int32_t sp = *t->TokenId("\u2581"), a = *t->TokenId("a"), spab = *t->TokenId("\u2581ab");
  // "▁ab": (▁,a) has rank 0, then (▁a,b) rank 2; (a,b) never forms.
  EXPECT_EQ(t->Encode("ab"), (Ids{spab}));
  EXPECT_EQ(t->Encode("ab", true), (Ids{1, spab}));
  // Spaces are pieces too: "▁ab▁▁a" -> ▁ab, ▁, ▁a.
  EXPECT_EQ(t->Encode("ab  a"), (Ids{spab, sp, *t->TokenId("\u2581a")}));
  EXPECT_EQ(t->Encode("a"), (Ids{*t->TokenId("\u2581a")}));
  EXPECT_EQ(t->Encode(""), (Ids{}));
  // The normalizer runs on each piece between added tokens: Prepend again after <s>.
  EXPECT_EQ(t->Encode("<s>a"), (Ids{1, *t->TokenId("\u2581a")}));
  EXPECT_EQ(t->Encode("a</s>b"), (Ids{*t->TokenId("\u2581a"), 2, sp, *t->TokenId("b")}));
  (void)a;
}

TEST(SentencePieceBpe, ByteFallbackAndUnknownPieces) {
  const std::vector<std::string> pieces{"\u2581", "a"};
  auto fallback = Make(TinySentencePiece(pieces, {}, true, true));
  auto fused = Make(TinySentencePiece(pieces, {}, false, true));
  auto unfused = Make(TinySentencePiece(pieces, {}, false, false));
  ASSERT_NE(fallback, nullptr);
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(unfused, nullptr);
  const int32_t sp = *fallback->TokenId("\u2581"), a = *fallback->TokenId("a");
  // é is C3 A9; \n is 0A.
  EXPECT_EQ(fallback->Encode("a\xc3\xa9\n"), (Ids{sp, a, kByte0 + 0xC3, kByte0 + 0xA9, kByte0 + 0x0A}));
  EXPECT_EQ(fused->Encode("a\xc3\xa9\nxa"), (Ids{sp, a, 0, a}));
  EXPECT_EQ(unfused->Encode("a\xc3\xa9\nxa"), (Ids{sp, a, 0, 0, 0, a}));
  // Decoding: ▁ -> space, byte runs -> UTF-8 (or U+FFFD per piece), the first space dropped.
  EXPECT_EQ(fallback->Decode(fallback->Encode("a\xc3\xa9\n a")), "a\xc3\xa9\n a");
  EXPECT_EQ(fallback->Decode({sp, a, kByte0 + 0xC3, a}), "a\xef\xbf\xbd" "a");
  EXPECT_EQ(fallback->Decode({1, sp, a}, /*skip_special_tokens=*/true), "a");
  EXPECT_EQ(fallback->Decode({1, sp, a}), "<s> a");
}

TEST(SentencePieceBpe, MetaspacePrependSchemesAndSplit) {
  const std::vector<std::string> pieces{"\u2581", "a", "b", "\u2581a"};
  const std::vector<std::pair<std::string, std::string>> merges{{"\u2581", "a"}};
  auto meta = [](const char* scheme, bool split) {
    return json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme},
                {"split", split}};
  };
  auto first = Make(TinySentencePiece(pieces, merges, true, true, meta("first", false)));
  auto always = Make(TinySentencePiece(pieces, merges, true, true, meta("always", true)));
  auto never = Make(TinySentencePiece(pieces, merges, true, true, meta("never", false)));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(always, nullptr);
  ASSERT_NE(never, nullptr);
  const int32_t sp = *first->TokenId("\u2581"), a = *first->TokenId("a"),
                b = *first->TokenId("b"), spa = *first->TokenId("\u2581a");
  EXPECT_EQ(first->Encode("a b"), (Ids{spa, sp, b}));
  EXPECT_EQ(never->Encode("a b"), (Ids{a, sp, b}));
  // "first": only the piece at the start of the input gets the prefix.
  EXPECT_EQ(first->Encode("<s>a"), (Ids{1, a}));
  EXPECT_EQ(always->Encode("<s>a"), (Ids{1, spa}));
  // No second prefix when the text starts with a space.
  EXPECT_EQ(first->Encode(" a"), (Ids{spa}));
  EXPECT_EQ(first->Decode(first->Encode("a b")), "a b");

  Metaspace m;
  std::vector<absl::string_view> pieces_out;
  std::deque<std::string> scratch;
  m.Split("a  b ", true, &pieces_out, &scratch);
  EXPECT_EQ(std::vector<std::string>(pieces_out.begin(), pieces_out.end()),
            (std::vector<std::string>{"\u2581a", "\u2581", "\u2581b", "\u2581"}));
}

TEST(SentencePieceBpe, RefusesWhatItCannotRunNamingIt) {
  auto refused = [](const json& j, const std::string& needle) {
    auto t = Tokenizer::FromJson(j.dump(), "sp.json");
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status();
    EXPECT_NE(t.status().message().find("sp.json"), std::string::npos) << t.status();
  };
  json j = TinySentencePiece({"\u2581"}, {}, true, true);
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
  refused(j, "Replace");
  j = TinySentencePiece({"\u2581"}, {}, true, true);
  j["decoder"] = {{"type", "WordPiece"}};
  refused(j, "WordPiece");
  j = TinySentencePiece({"\u2581"}, {}, true, true);
  j["model"]["unk_token"] = "<nope>";
  refused(j, "unk_token");
  j = TinySentencePiece({"\u2581"}, {}, true, true);
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Metaspace"}, {"replacement", "\u2581"}},
                          {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Isolated"}}}}};
  refused(j, "Metaspace");
  j = TinySentencePiece({"\u2581"}, {}, true, true);
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
  refused(j, "sometimes");
  j = TinySentencePiece({"\u2581"}, {}, true, true);
  j["normalizer"] = {{"type", "Precompiled"}};
  refused(j, "Precompiled");
}

// The fixtures: ids from the tokenizers package for every corpus line, both without and
// with the special tokens of the template; where the line has "decoded", also the text
// that tokenizers' decode gives back (special tokens skipped).
void CheckEncodings(const std::string& tokenizer_path, const std::string& encodings_path,
                    const std::string& family) {
  std::ifstream encodings(encodings_path);
  ASSERT_TRUE(encodings) << encodings_path << " (tests/reference/make_tokenizer_fixtures.py makes it)";
  auto tok = Tokenizer::Load(tokenizer_path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string line;
  int n = 0, mismatches = 0, decoded = 0;
  BpeCache cache;
  while (std::getline(encodings, line)) {
    if (line.empty()) continue;
    const json e = json::parse(line);
    const std::string text = e.at("text").get<std::string>();
    std::vector<int32_t> ids, with;
    (*tok)->Encode(text, false, &ids, &cache);
    (*tok)->Encode(text, true, &with, &cache);
    const auto want = e.at("ids").get<std::vector<int32_t>>();
    const auto want_with = e.at("ids_with_special").get<std::vector<int32_t>>();
    ++n;
    bool ok = ids == want && with == want_with;
    if (e.contains("decoded")) {
      ++decoded;
      ok = ok && (*tok)->Decode(want, /*skip_special_tokens=*/true) == e.at("decoded").get<std::string>();
    }
    if (!ok && ++mismatches <= 5) ADD_FAILURE() << family << " line " << n << ": " << json(text).dump();
  }
  EXPECT_GT(n, 0);
  EXPECT_EQ(mismatches, 0) << "of " << n << " lines (" << decoded << " with decoded text)";
}

const std::string kFixtures = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/tokenizer/";

void CheckFixture(const std::string& family) {
  CheckEncodings(kFixtures + family, kFixtures + family + "/encodings.jsonl", family);
}

TEST(TokenizerFixtures, Qwen2MatchesHuggingFace) { CheckFixture("qwen2"); }
TEST(TokenizerFixtures, Llama3MatchesHuggingFace) { CheckFixture("llama3"); }

// stories260K's tokenizer as tokenizers 0.23 saves it (merges as [a, b] pairs) ...
TEST(TokenizerFixtures, Stories260kMatchesHuggingFace) { CheckFixture("stories260k"); }
// ... and the model's own file (merges as "a b" strings) give the same ids.
TEST(TokenizerFixtures, Stories260kModelFileMatchesHuggingFace) {
  CheckEncodings(std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/stories260k/model",
                 kFixtures + "stories260k/encodings.jsonl", "stories260K");
}

// A real Llama-2-format file (32,000 pieces; the vocabulary is Mistral 7B's, see
// tests/reference/fixtures/tokenizer/mistral/SOURCE.md), extracted from its tar.gz by the
// CMake set-up.
std::string MistralDir() { return std::string(SLIDEDP_TEST_FIXTURES_DIR) + "/tokenizer/mistral"; }

TEST(TokenizerFixtures, MistralMatchesHuggingFace) {
  const std::string encodings = kFixtures + "mistral/encodings.jsonl";
  if (!std::ifstream(encodings)) {
    GTEST_SKIP() << encodings << " is not made yet: on the GPU host run "
                 << "tests/reference/make_tokenizer_fixtures.py OUT --only mistral";
  }
  CheckEncodings(MistralDir(), encodings, "mistral");
}

// Until that fixture exists: the same corpus through transformers.js (another
// implementation, mistral/SOURCE.md says how it was made).
TEST(TokenizerFixtures, MistralMatchesTransformersJs) {
  CheckEncodings(MistralDir(), kFixtures + "mistral/encodings_transformers_js.jsonl", "mistral");
}

// The real Llama 3 and Qwen3 files, fetched with npm by the CMake set-up, against
// transformers.js (llama3_real/SOURCE.md).
TEST(TokenizerFixtures, RealLlama3AndQwen3FilesMatchTransformersJs) {
  for (const std::string name : {"llama3_real", "qwen3_real"}) {
    const std::string dir = std::string(SLIDEDP_TEST_FIXTURES_DIR) + "/tokenizer/" + name;
    if (!std::ifstream(dir + "/tokenizer.json")) {
      GTEST_SKIP() << dir << "/tokenizer.json is missing: the CMake set-up fetches it with npm";
    }
    CheckEncodings(dir, kFixtures + name + "/encodings_transformers_js.jsonl", name);
  }
}

// The same files against Hugging Face tokenizers itself, once the GPU host made the
// fixture (make_tokenizer_fixtures.py --only llama3_real,qwen3_real, from the files this
// build fetched; versions.json records the file's size, checked here).
TEST(TokenizerFixtures, RealLlama3AndQwen3FilesMatchHuggingFace) {
  for (const std::string name : {"llama3_real", "qwen3_real"}) {
    const std::string dir = std::string(SLIDEDP_TEST_FIXTURES_DIR) + "/tokenizer/" + name;
    std::ifstream file(dir + "/tokenizer.json", std::ios::binary | std::ios::ate);
    if (!file) GTEST_SKIP() << dir << "/tokenizer.json is missing: the CMake set-up fetches it with npm";
    std::ifstream versions(kFixtures + name + "/versions.json");
    if (!versions) {
      GTEST_SKIP() << name << "/encodings.jsonl is not made yet: on the GPU host run "
                   << "tests/reference/make_tokenizer_fixtures.py OUT --only " << name;
    }
    const json v = json::parse(versions);
    ASSERT_EQ(static_cast<int64_t>(file.tellg()), v.at("tokenizer_json_bytes").get<int64_t>())
        << dir << "/tokenizer.json is not the file the fixture was made from";
    CheckEncodings(dir, kFixtures + name + "/encodings.jsonl", name);
  }
}

TEST(TokenizerFixtures, MetaspaceMatchesHuggingFace) {
  for (const char* kind : {"metaspace_first", "metaspace_split"}) {
    if (!std::ifstream(kFixtures + kind + "/encodings.jsonl")) {
      GTEST_SKIP() << kind << "/encodings.jsonl is not made yet: on the GPU host run "
                   << "tests/reference/make_tokenizer_fixtures.py OUT --only " << kind;
    }
    CheckFixture(kind);
  }
}

// Facts of the real file that hold whatever the fixture: a newline is "▁" and the byte
// piece <0x0A> (the vocabulary's ids 28705 and 13), the template adds <s>, and decoding
// gives the text back.
TEST(TokenizerFixtures, MistralRealFileLoadsAndRoundTrips) {
  auto tok = Tokenizer::Load(MistralDir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 32000);
  EXPECT_EQ(t.TokenId("<0x0A>"), 13);
  EXPECT_EQ(t.TokenId("\u2581"), 28705);
  EXPECT_EQ(t.Encode("\n"), (Ids{28705, 13}));
  EXPECT_EQ(t.Encode("Hello world", true),
            (Ids{1, *t.TokenId("\u2581Hello"), *t.TokenId("\u2581world")}));
  std::ifstream corpus(kFixtures + "corpus.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(corpus, line)) {
    const std::string text = json::parse(line).at("text").get<std::string>();
    if (text.find("<s>") != std::string::npos || text.find("</s>") != std::string::npos) continue;
    EXPECT_EQ(t.Decode(t.Encode(text)), text) << json(text).dump();
    ++n;
  }
  EXPECT_GT(n, 30);
}

}  // namespace
}  // namespace slidedp
