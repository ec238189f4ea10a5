// Tests of the text dataset formats (runtime/data/text_records, document_encoder,
// corpus_tokenizer, token_cache, text_dataset): ids and loss masks of text,
// prompt/completion and chat (ChatML and Llama 3) documents against hand-written
// renderings tokenized whole, document positions, cursors, the token cache (reuse,
// rebuild, truncation), bad lines, threads. The tokenizers are the fixtures of
// tests/reference/fixtures/tokenizer; files live in TempDir().
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "runtime/data/corpus_tokenizer.h"
#include "runtime/data/dataset.h"
#include "runtime/data/document_encoder.h"
#include "runtime/data/packed_dataset.h"
#include "runtime/data/text_dataset.h"
#include "runtime/data/text_records.h"
#include "runtime/data/token_cache.h"
#include "runtime/data/tokenizer/tokenizer.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult Contains(absl::string_view text, absl::string_view part) {
  if (absl::StrContains(text, part)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

std::string FixtureDir(const std::string& family) {
  return std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/tokenizer/" + family;
}

const Tokenizer& Fixture(const std::string& family) {
  static auto* qwen = Tokenizer::Load(FixtureDir("qwen2")).value().release();
  static auto* llama = Tokenizer::Load(FixtureDir("llama3")).value().release();
  static auto* stories = Tokenizer::Load(FixtureDir("stories260k")).value().release();
  return family == "qwen2" ? *qwen : family == "stories260k" ? *stories : *llama;
}

// A fresh directory per test under TempDir().
std::string TestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = ::testing::TempDir() + "/text_" + info->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  EXPECT_TRUE(out.good()) << path;
  return path;
}

int32_t Id(const Tokenizer& t, const char* token) { return t.TokenId(token).value(); }

// Builds expected ids and flags piece by piece.
struct Expected {
  explicit Expected(const Tokenizer* t) : tok(t) {}
  const Tokenizer* tok;
  std::vector<int32_t> ids;
  std::vector<uint8_t> flags;
  void Text(absl::string_view text, bool loss, bool special = false) {
    std::vector<int32_t> piece = tok->Encode(text, special);
    ids.insert(ids.end(), piece.begin(), piece.end());
    flags.insert(flags.end(), piece.size(), loss ? kTokenLoss : 0);
  }
  void Token(const char* token, bool loss) {
    ids.push_back(Id(*tok, token));
    flags.push_back(loss ? kTokenLoss : 0);
  }
};

// The ids and flags of `line` in `format`, with the fixture tokenizer `fixture`.
Expected EncodeLine(const std::string& fixture, TextFormat format, ModelFamily family,
                    absl::string_view line) {
  Expected got{&Fixture(fixture)};
  absl::StatusOr<DocumentEncoder> e = DocumentEncoder::Create(*got.tok, format, family);
  EXPECT_TRUE(e.ok()) << e.status();
  absl::StatusOr<TextRecord> record = ParseTextRecord(line, format);
  EXPECT_TRUE(record.ok()) << record.status();
  if (e.ok() && record.ok()) e->Encode(*record, &got.ids, &got.flags);
  return got;
}

TEST(TextDatasetTest, TextDocumentIsEncodePlusEndOfText) {
  for (const auto& [family, model, end] :
       {std::tuple("qwen2", ModelFamily::kQwen2, "<|endoftext|>"),
        std::tuple("llama3", ModelFamily::kLlama, "<|end_of_text|>")}) {
    const Tokenizer& tok = Fixture(family);
    const Expected got =
        EncodeLine(family, TextFormat::kText, model, R"({"text": "Hello world, 123 times!", "id": 7})");
    const std::vector<int32_t>& ids = got.ids;
    const std::vector<uint8_t>& flags = got.flags;
    std::vector<int32_t> want = tok.Encode("Hello world, 123 times!", /*add_special_tokens=*/true);
    want.push_back(Id(tok, end));
    EXPECT_EQ(ids, want) << family;
    std::vector<uint8_t> want_flags(want.size(), kTokenLoss);
    want_flags[0] |= kTokenDocumentStart;
    EXPECT_EQ(flags, want_flags) << family;
  }
  EXPECT_EQ(Fixture("llama3").Encode("x", true)[0], Id(Fixture("llama3"), "<|begin_of_text|>"));
}

TEST(TextDatasetTest, PromptCompletionMaskCoversTheCompletionAndTheEnd) {
  const Expected got = EncodeLine("qwen2", TextFormat::kPromptCompletion, ModelFamily::kQwen3,
                                  R"({"prompt": "Translate: cat", "completion": " chat"})");
  const std::vector<int32_t>& ids = got.ids;
  const std::vector<uint8_t>& flags = got.flags;
  Expected want{got.tok};
  want.Text("Translate: cat", false, true);
  want.Text(" chat", true);
  want.Token("<|endoftext|>", true);
  want.flags[0] |= kTokenDocumentStart;
  EXPECT_EQ(ids, want.ids);
  EXPECT_EQ(flags, want.flags);
}

const char kChat[] =
    R"({"messages": [{"role": "system", "content": "You are terse."},)"
    R"( {"role": "user", "content": "Hello there"},)"
    R"( {"role": "assistant", "content": "Hi. What now?"},)"
    R"( {"role": "user", "content": "Count 1 2 3"},)"
    R"( {"role": "assistant", "content": "One two three"}]})";

TEST(TextDatasetTest, ChatMlRenderingAndAssistantMask) {
  const Tokenizer& tok = Fixture("qwen2");
  const Expected got = EncodeLine("qwen2", TextFormat::kChat, ModelFamily::kQwen2, kChat);
  const std::vector<int32_t>& ids = got.ids;
  const std::vector<uint8_t>& flags = got.flags;
  const std::string rendered =
      "<|im_start|>system\nYou are terse.<|im_end|>\n"
      "<|im_start|>user\nHello there<|im_end|>\n"
      "<|im_start|>assistant\nHi. What now?<|im_end|>\n"
      "<|im_start|>user\nCount 1 2 3<|im_end|>\n"
      "<|im_start|>assistant\nOne two three<|im_end|>\n<|endoftext|>";
  EXPECT_EQ(ids, tok.Encode(rendered, false));
  Expected want{&tok};
  want.Text("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello there"
            "<|im_end|>\n<|im_start|>assistant\n", false);
  want.Text("Hi. What now?", true);
  want.Token("<|im_end|>", true);
  want.Text("\n<|im_start|>user\nCount 1 2 3<|im_end|>\n<|im_start|>assistant\n", false);
  want.Text("One two three", true);
  want.Token("<|im_end|>", true);
  want.Text("\n<|endoftext|>", false);
  want.flags[0] |= kTokenDocumentStart;
  EXPECT_EQ(want.ids, ids);
  EXPECT_EQ(flags, want.flags);
}

TEST(TextDatasetTest, Llama3RenderingAndAssistantMask) {
  const Tokenizer& tok = Fixture("llama3");
  const Expected got = EncodeLine("llama3", TextFormat::kChat, ModelFamily::kLlama, kChat);
  const std::vector<int32_t>& ids = got.ids;
  const std::vector<uint8_t>& flags = got.flags;
  const std::string rendered =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi. What now?<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nCount 1 2 3<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nOne two three<|eot_id|><|end_of_text|>";
  EXPECT_EQ(ids, tok.Encode(rendered, false));
  Expected want{&tok};
  want.Text("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse."
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n", false);
  want.Text("Hi. What now?", true);
  want.Token("<|eot_id|>", true);
  want.Text("<|start_header_id|>user<|end_header_id|>\n\nCount 1 2 3<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n", false);
  want.Text("One two three", true);
  want.Token("<|eot_id|>", true);
  want.Token("<|end_of_text|>", false);
  want.flags[0] |= kTokenDocumentStart;
  EXPECT_EQ(flags, want.flags);
}

// Llama 2's [INST] format (a llama model with a </s> tokenizer, here stories260K's) and
// Mistral's (<s> once, the system message without <<SYS>>).
TEST(TextDatasetTest, InstRenderingAndAssistantMaskForLlama2AndMistral) {
  const Tokenizer& tok = Fixture("stories260k");
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kMistral}) {
    const bool llama2 = family == ModelFamily::kLlama;
    const Expected got = EncodeLine("stories260k", TextFormat::kChat, family, kChat);
    Expected want{&tok};
    want.Token("<s>", false);
    want.Text(llama2 ? "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello there [/INST]"
                     : "[INST] You are terse.\n\nHello there [/INST]",
              false);
    want.Text("Hi. What now?", true);
    want.Token("</s>", true);
    if (llama2) want.Token("<s>", false);
    want.Text("[INST] Count 1 2 3 [/INST]", false);
    want.Text("One two three", true);
    want.Token("</s>", true);
    want.flags[0] |= kTokenDocumentStart;
    EXPECT_EQ(got.ids, want.ids) << FamilyName(family);
    EXPECT_EQ(got.flags, want.flags) << FamilyName(family);
    // The assistant's text is tokenized apart; its ids are those of "[/INST] {content}"
    // in the rendered string, whose Prepend gives the same "\u2581" before its first word.
    const std::string rendered =
        llama2 ? "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello there [/INST] Hi. What now?"
                 "</s><s>[INST] Count 1 2 3 [/INST] One two three</s>"
               : "<s>[INST] You are terse.\n\nHello there [/INST] Hi. What now?</s>"
                 "[INST] Count 1 2 3 [/INST] One two three</s>";
    // (The rendered string's pieces after </s> also get the Prepend "\u2581".)
    EXPECT_EQ(tok.Decode(got.ids), tok.Decode(tok.Encode(rendered)));
  }
  // Text documents: <s> from the template, </s> at the end.
  const Expected text = EncodeLine("stories260k", TextFormat::kText, ModelFamily::kLlama,
                                   R"({"text": "Once upon a time"})");
  Expected want{&tok};
  want.Text("Once upon a time", true, /*special=*/true);
  want.Token("</s>", true);
  want.flags[0] |= kTokenDocumentStart;
  EXPECT_EQ(text.ids, want.ids);
  EXPECT_EQ(text.flags, want.flags);
}

TEST(TextDatasetTest, MissingSpecialTokenIsNamed) {
  auto e = DocumentEncoder::Create(Fixture("llama3"), TextFormat::kChat, ModelFamily::kQwen2);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(Contains(e.status().message(), "<|endoftext|>")) << e.status();
  e = DocumentEncoder::Create(Fixture("qwen2"), TextFormat::kText, ModelFamily::kLlama);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(Contains(e.status().message(), "<|end_of_text|>")) << e.status();
}

// Documents [0,3), [3,8), [8,10) with loss on all but tokens 4 and 5.
std::unique_ptr<TokenSource> ThreeDocuments() {
  std::vector<int32_t> ids = {10, 11, 12, 20, 21, 22, 23, 24, 30, 31};
  std::vector<uint8_t> flags(ids.size(), kTokenLoss);
  flags[4] = flags[5] = 0;
  for (int s : {0, 3, 8}) flags[s] |= kTokenDocumentStart;
  return std::make_unique<InMemoryTokenSource>(ids, "three", flags);
}

TEST(TextDatasetTest, MasksBecomeIgnoredTargetsAndPositionsRestartAtDocuments) {
  auto packed = PackedDataset::Create(ThreeDocuments(), 3, 1, /*shuffle=*/false,
                                      /*document_mask=*/true);
  ASSERT_TRUE(packed.ok()) << packed.status();
  absl::StatusOr<TokenBatch> b = (*packed)->Next(3);  // windows at 0, 3, 6
  ASSERT_TRUE(b.ok()) << b.status();
  const int32_t X = kIgnoreIndex;
  EXPECT_EQ(b->inputs, (std::vector<int32_t>{10, 11, 12, 20, 21, 22, 23, 24, 30}));
  // Targets 20 and 30 start documents; 21 and 22 carry no loss.
  EXPECT_EQ(b->targets, (std::vector<int32_t>{11, 12, X, X, X, 23, 24, X, 31}));
  // The window at 6 starts inside the second document (at its position 3): its first
  // token is position 0; the third document restarts at 0.
  EXPECT_EQ(b->positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 0}));
  auto two = PackedDataset::Create(ThreeDocuments(), 9, 1, false, true);
  b = (*two)->Next(1);
  EXPECT_EQ(b->positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4, 0}));
  // Without document_mask: masks only, no positions, document starts trained.
  auto plain = PackedDataset::Create(ThreeDocuments(), 3, 1, false, false);
  b = (*plain)->Next(1);
  EXPECT_TRUE(b->positions.empty());
  b = (*plain)->Next(1);
  EXPECT_EQ(b->targets, (std::vector<int32_t>{X, X, 23}));
  auto flagless = PackedDataset::Create(
      std::make_unique<InMemoryTokenSource>(std::vector<int32_t>{1, 2, 3}, "flat"), 2, 1, false, true);
  EXPECT_EQ(flagless.status().code(), absl::StatusCode::kInvalidArgument);
}

// A chat file of `n` conversations, the i-th answering with i words.
std::string ChatLines(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    std::string answer = "Yes";
    for (int w = 0; w < i % 7; ++w) answer += " and more";
    out += R"({"messages": [{"role": "user", "content": "Question )" + std::to_string(i) +
           R"("}, {"role": "assistant", "content": ")" + answer + R"("}]})" + "\n";
  }
  return out;
}

DataConfig ChatConfig(const std::string& dir, const std::string& file) {
  DataConfig data;
  data.format = DataFormat::kChat;
  data.path = file;
  data.tokenizer = FixtureDir("qwen2");
  data.cache_dir = dir + "/cache";
  data.document_mask = true;
  return data;
}

DataModel QwenModel() {
  return DataModel{Fixture("qwen2").vocab_size(), ModelFamily::kQwen2, ""};
}

TEST(TextDatasetTest, CursorRestoreContinuesWithIdenticalBatches) {
  const std::string dir = TestDir();
  const DataConfig data = ChatConfig(dir, WriteFile(dir + "/chat.jsonl", ChatLines(40)));
  auto a = OpenDataset(data, QwenModel(), 16, 5);
  ASSERT_TRUE(a.ok()) << a.status();
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*a)->Next(3).ok());
  const std::string cursor = (*a)->Cursor();
  auto b = OpenDataset(data, QwenModel(), 16, 5);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->Restore(cursor).ok());
  for (int i = 0; i < 30; ++i) {  // past the end of the epoch
    absl::StatusOr<TokenBatch> x = (*a)->Next(3), y = (*b)->Next(3);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->inputs, y->inputs);
    EXPECT_EQ(x->targets, y->targets);
    EXPECT_EQ(x->positions, y->positions);
    ASSERT_EQ(x->positions.size(), x->inputs.size());
  }
}

TEST(TextDatasetTest, CacheIsReusedThenRebuiltWhenFileOrTokenizerChange) {
  const std::string dir = TestDir();
  const std::string file = WriteFile(dir + "/docs.jsonl", R"({"text": "one two three"})"
                                                          "\n" R"({"text": "four five"})" "\n");
  DataConfig data;
  data.format = DataFormat::kText;
  data.path = file;
  data.tokenizer = FixtureDir("qwen2");
  const int64_t runs = TokenizeCorpusRuns();
  auto first = OpenDataset(data, QwenModel(), 4, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 1);
  EXPECT_TRUE(Contains((*first)->Describe(), "cache written " + dir + "/.slidedp-cache/"));
  auto second = OpenDataset(data, QwenModel(), 4, 1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 1);  // not tokenized again
  EXPECT_TRUE(Contains((*second)->Describe(), "cache reused"));
  EXPECT_EQ((*first)->Next(2)->inputs, (*second)->Next(2)->inputs);

  // Another tokenizer (and family): a new cache.
  DataConfig llama = data;
  llama.tokenizer = FixtureDir("llama3");
  const DataModel llama_model{Fixture("llama3").vocab_size(), ModelFamily::kLlama, ""};
  ASSERT_TRUE(OpenDataset(llama, llama_model, 4, 1).ok());
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 2);
  ASSERT_TRUE(OpenDataset(llama, llama_model, 4, 1).ok());
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 2);

  // The file changes: a new cache, with the new document.
  WriteFile(file, R"({"text": "one two three"})" "\n" R"({"text": "six seven eight"})" "\n");
  auto changed = OpenDataset(data, QwenModel(), 4, 1);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 3);
  EXPECT_TRUE(Contains((*changed)->Describe(), "cache written"));
}

TEST(TextDatasetTest, TruncatedOrCorruptCacheIsDetectedAndRebuilt) {
  const std::string dir = TestDir();
  DataConfig data = ChatConfig(dir, WriteFile(dir + "/chat.jsonl", ChatLines(5)));
  ASSERT_TRUE(OpenDataset(data, QwenModel(), 8, 1).ok());
  std::vector<fs::path> caches;
  for (const auto& entry : fs::directory_iterator(data.cache_dir)) caches.push_back(entry.path());
  ASSERT_EQ(caches.size(), 1u);
  const std::string cache = caches[0].string();
  const auto size = fs::file_size(cache);
  const int64_t runs = TokenizeCorpusRuns();

  fs::resize_file(cache, size - 3);
  absl::Status opened = OpenTokenCache(cache, "any key").status();
  EXPECT_EQ(opened.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(opened.message(), "truncated")) << opened;
  auto rebuilt = OpenDataset(data, QwenModel(), 8, 1);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 1);
  EXPECT_EQ(fs::file_size(cache), size);

  {  // One flipped bit in the flags: the checksum catches it.
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 1));
    f.put('\x7f');
  }
  ASSERT_TRUE(OpenDataset(data, QwenModel(), 8, 1).ok());
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 2);
  ASSERT_TRUE(OpenDataset(data, QwenModel(), 8, 1).ok());
  EXPECT_EQ(TokenizeCorpusRuns(), runs + 2);
}

TEST(TextDatasetTest, BadLinesNameTheFileAndLineOrAreSkippedAndCounted) {
  const std::string dir = TestDir();
  const std::string good = R"({"messages": [{"role": "assistant", "content": "ok"}]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not valid JSON"},
      {R"({"text": "x"})", "missing \"messages\""},
      {R"({"messages": "hi"})", "\"messages\" must be an array, got string"},
      {R"({"messages": []})", "\"messages\" is empty"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].role \"tool\""},
      {R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content must be a string"},
      {R"({"messages": [{"role": "user", "content": "q"}]})", "\"messages\" has no assistant message"},
      {"[1, 2]", "expected a JSON object"},
  };
  for (const auto& [bad, what] : cases) {
    DataConfig data = ChatConfig(dir, WriteFile(dir + "/bad.jsonl", good + "\n\n" + bad + "\n" + good + "\n"));
    auto d = OpenDataset(data, QwenModel(), 4, 1);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(d.status().message(), data.path + ":3: " + what)) << d.status();
    data.skip_bad_lines = true;
    d = OpenDataset(data, QwenModel(), 4, 1);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(Contains((*d)->Describe(), "2 documents, 1 bad lines skipped")) << (*d)->Describe();
  }
  // A cache that skipped a bad line does not excuse a job that does not skip.
  DataConfig strict = ChatConfig(dir, dir + "/bad.jsonl");
  EXPECT_FALSE(OpenDataset(strict, QwenModel(), 4, 1).ok());
  DataConfig none = ChatConfig(dir, WriteFile(dir + "/none.jsonl", "{}\n[]\n"));
  none.skip_bad_lines = true;
  absl::Status s = OpenDataset(none, QwenModel(), 4, 1).status();
  EXPECT_TRUE(Contains(s.message(), "no usable documents (2 bad lines skipped")) << s;
}

TEST(TextDatasetTest, ThreadsAndChunksGiveIdenticalResults) {
  const Tokenizer& tok = Fixture("qwen2");
  auto e = DocumentEncoder::Create(tok, TextFormat::kChat, ModelFamily::kQwen2);
  ASSERT_TRUE(e.ok());
  std::string text = ChatLines(200);
  CorpusOptions one;
  one.threads = 1;
  one.chunk_bytes = int64_t{1} << 30;
  CorpusOptions many;
  many.threads = 4;
  many.chunk_bytes = 97;
  auto a = TokenizeCorpus(text, "c.jsonl", *e, one);
  auto b = TokenizeCorpus(text, "c.jsonl", *e, many);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
  EXPECT_EQ(a->flags, b->flags);
  EXPECT_EQ(a->documents, 200);
  EXPECT_EQ(b->documents, 200);
  // The first bad line is named the same way however the file is cut.
  const size_t cut = text.find('\n', text.size() / 2) + 1;
  text.insert(cut, "oops\n");
  const std::string line = std::to_string(std::count(text.begin(), text.begin() + cut, '\n') + 1);
  text += "again bad\n";
  absl::Status x = TokenizeCorpus(text, "c.jsonl", *e, one).status();
  absl::Status y = TokenizeCorpus(text, "c.jsonl", *e, many).status();
  EXPECT_EQ(x, y);
  EXPECT_TRUE(Contains(x.message(), "c.jsonl:" + line + ": not valid JSON")) << x;
  many.skip_bad_lines = one.skip_bad_lines = true;
  a = TokenizeCorpus(text, "c.jsonl", *e, one);
  b = TokenizeCorpus(text, "c.jsonl", *e, many);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
  EXPECT_EQ(b->bad_lines, 2);
  EXPECT_TRUE(Contains(b->first_bad_line, "c.jsonl:" + line + ":")) << b->first_bad_line;
}

TEST(TextDatasetTest, TokenizerComesFromDataTokenizerOrTheModelDirectory) {
  const std::string dir = TestDir();
  const std::string file = WriteFile(dir + "/t.jsonl", R"({"text": "hello"})" "\n");
  DataConfig data;
  data.format = DataFormat::kText;
  data.path = file;
  data.cache_dir = dir + "/cache";
  absl::Status preset = OpenDataset(data, QwenModel(), 1, 1).status();
  EXPECT_EQ(preset.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(preset.message(), "data.tokenizer must be set")) << preset;
  DataModel model = QwenModel();
  model.directory = dir + "/model";
  fs::create_directories(model.directory);
  absl::Status empty_dir = OpenDataset(data, model, 1, 1).status();
  EXPECT_TRUE(Contains(empty_dir.message(), "has no tokenizer.json; set data.tokenizer")) << empty_dir;
  fs::copy_file(FixtureDir("qwen2") + "/tokenizer.json", model.directory + "/tokenizer.json");
  auto d = OpenDataset(data, model, 1, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(Contains((*d)->Describe(), model.directory + "/tokenizer.json"));
  data.tokenizer = dir + "/nowhere.json";
  EXPECT_TRUE(Contains(OpenDataset(data, model, 1, 1).status().message(), "data.tokenizer"));
  // Ids beyond the model's vocabulary.
  data.tokenizer = FixtureDir("qwen2") + "/tokenizer.json";
  model.vocab_size = 3;
  absl::Status small = OpenDataset(data, model, 1, 1).status();
  EXPECT_TRUE(Contains(small.message(), "not below the model's vocab_size 3")) << small;
}

TEST(TextDatasetTest, EvalDatasetReadsEvalPathInOrder) {
  const std::string dir = TestDir();
  DataConfig data = ChatConfig(dir, WriteFile(dir + "/train.jsonl", ChatLines(30)));
  EXPECT_EQ(OpenEvalDataset(data, QwenModel(), 8, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  data.eval_path = WriteFile(dir + "/eval.jsonl", ChatLines(6));
  auto eval = OpenEvalDataset(data, QwenModel(), 8, 1);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_TRUE(Contains((*eval)->Describe(), "eval.jsonl"));
  EXPECT_TRUE(Contains((*eval)->Describe(), "in order"));
  DataConfig in_order = data;
  in_order.path = data.eval_path;
  in_order.shuffle = false;
  auto plain = OpenDataset(in_order, QwenModel(), 8, 1);
  ASSERT_TRUE(plain.ok());
  const std::string start = (*eval)->Cursor();
  absl::StatusOr<TokenBatch> x = (*eval)->Next(4), y = (*plain)->Next(4);
  EXPECT_EQ(x->inputs, y->inputs);
  EXPECT_EQ(x->positions, y->positions);
  ASSERT_TRUE((*eval)->Restore(start).ok());
  EXPECT_EQ((*eval)->Next(4)->inputs, x->inputs);
}

}  // namespace
}  // namespace slidedp
