// Tokenizer tests: the pre-tokenizer's RE2 translation (lookahead, Unicode \s) on known
// splits, BPE merge order on a hand-made tokenizer.json, added tokens, NFC, the
// template, and the ids of the fixtures made with the Hugging Face tokenizers package
// (tests/reference/make_tokenizer_fixtures.py) for Qwen2- and Llama-3-style files.
#include "runtime/data/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

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

// The fixtures: ids from the tokenizers package for every corpus line, both without and
// with the special tokens of the template.
void CheckFixture(const std::string& family) {
  const std::string dir =
      std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/tokenizer/" + family;
  std::ifstream encodings(dir + "/encodings.jsonl");
  ASSERT_TRUE(encodings) << dir << " (tests/reference/make_tokenizer_fixtures.py makes it)";
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string line;
  int n = 0, mismatches = 0;
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
    if (ids != want || with != want_with) {
      if (++mismatches <= 5) ADD_FAILURE() << family << " line " << n << ": " << json(text).dump();
    }
  }
  EXPECT_GT(n, 0);
  EXPECT_EQ(mismatches, 0) << "of " << n << " lines";
}

TEST(TokenizerFixtures, Qwen2MatchesHuggingFace) { CheckFixture("qwen2"); }
TEST(TokenizerFixtures, Llama3MatchesHuggingFace) { CheckFixture("llama3"); }

}  // namespace
}  // namespace slidedp
