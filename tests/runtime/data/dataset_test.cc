// Tests of runtime/data: token files (nanoGPT raw, llm.c header), JSON lines, the
// synthetic corpus, packing, shuffling, epochs and cursors. Files live in TempDir().
#include "runtime/data/dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "runtime/data/data_cursor.h"
#include "runtime/data/jsonl_tokens.h"
#include "runtime/data/packed_dataset.h"
#include "runtime/data/synthetic_corpus.h"
#include "runtime/data/token_file.h"
#include "runtime/data/window_permutation.h"

namespace slidedp {
namespace {

// True if `text` contains `part`; prints both otherwise (no gmock in this binary).
::testing::AssertionResult Contains(absl::string_view text, absl::string_view part) {
  if (absl::StrContains(text, part)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
  return path;
}

void AppendLE(std::string& bytes, uint64_t value, int width) {
  for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((value >> (8 * b)) & 0xff));
}

std::string RawTokens(const std::vector<uint32_t>& tokens, int width) {
  std::string bytes;
  for (uint32_t t : tokens) AppendLE(bytes, t, width);
  return bytes;
}

std::string LlmcFile(const std::vector<uint32_t>& tokens, int version, int64_t claimed) {
  std::string bytes;
  std::vector<int32_t> header(kLlmcHeaderInts, 0);
  header[0] = kLlmcMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(claimed);
  for (int32_t h : header) AppendLE(bytes, static_cast<uint32_t>(h), 4);
  return bytes + RawTokens(tokens, version == 1 ? 2 : 4);
}

// tokens[i] = (i * 7 + 3) % modulus
std::vector<uint32_t> KnownTokens(int64_t n, uint32_t modulus, uint32_t base = 0) {
  std::vector<uint32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = base + static_cast<uint32_t>((i * 7 + 3) % modulus);
  return t;
}

DataConfig TokensConfig(const std::string& path, TokenDtype dtype = TokenDtype::kUint16,
                        bool shuffle = false) {
  DataConfig c;
  c.format = DataFormat::kTokens;
  c.path = path;
  c.token_dtype = dtype;
  c.shuffle = shuffle;
  return c;
}

std::unique_ptr<Dataset> MustOpen(const DataConfig& c, int64_t seq_len, int64_t vocab,
                                  uint64_t seed = 1) {
  absl::StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(c, seq_len, vocab, seed);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

TokenBatch MustNext(Dataset& d, int64_t rows) {
  absl::StatusOr<TokenBatch> b = d.Next(rows);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : TokenBatch{};
}

// Unshuffled rows r = 0..rows-1 are windows first_window + r of `tokens`.
void ExpectSequentialWindows(const TokenBatch& b, const std::vector<uint32_t>& tokens,
                             int64_t first_window) {
  const int64_t T = b.seq_len;
  ASSERT_EQ(b.inputs.size(), static_cast<size_t>(b.rows * T));
  ASSERT_EQ(b.targets.size(), static_cast<size_t>(b.rows * T));
  for (int64_t r = 0; r < b.rows; ++r) {
    for (int64_t j = 0; j < T; ++j) {
      const int64_t pos = (first_window + r) * T + j;
      ASSERT_EQ(b.inputs[r * T + j], static_cast<int32_t>(tokens[pos])) << r << "," << j;
      ASSERT_EQ(b.targets[r * T + j], static_cast<int32_t>(tokens[pos + 1])) << r << "," << j;
    }
  }
}

// The window index of each row, from its first input (tokens[i] = i streams).
std::vector<int64_t> WindowIds(const TokenBatch& b) {
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < b.rows; ++r) ids.push_back(b.inputs[r * b.seq_len] / b.seq_len);
  return ids;
}

std::vector<uint32_t> Iota(int64_t n) {
  std::vector<uint32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i);
  return t;
}

// ---- token files ----

TEST(TokenFileTest, NanoGptUint16KnownPositions) {
  // 1400 bytes: longer than an llm.c header, but no magic, so raw.
  const std::vector<uint32_t> tokens = KnownTokens(700, 1000);
  const std::string path = WriteFile("nanogpt.bin", RawTokens(tokens, 2));
  auto d = MustOpen(TokensConfig(path), /*seq_len=*/8, /*vocab=*/1000);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(static_cast<PackedDataset&>(*d).windows_per_epoch(), 699 / 8);
  TokenBatch b = MustNext(*d, 3);
  EXPECT_EQ(b.rows, 3);
  EXPECT_EQ(b.seq_len, 8);
  ExpectSequentialWindows(b, tokens, 0);
  EXPECT_EQ(b.inputs[8 + 2], static_cast<int32_t>(tokens[10]));  // row 1 starts at token 8
  EXPECT_EQ(b.targets[7], b.inputs[8]);                          // windows share one token
  EXPECT_TRUE(Contains(d->Describe(), path));
  EXPECT_TRUE(Contains(d->Describe(), "700 tokens"));
}

TEST(TokenFileTest, LlmcHeaderVersion1) {
  const std::vector<uint32_t> tokens = KnownTokens(50, 50000);
  const std::string path = WriteFile("llmc_v1.bin", LlmcFile(tokens, 1, 50));
  // token_dtype is ignored: the header decides.
  auto d = MustOpen(TokensConfig(path, TokenDtype::kUint32), 7, 50257);
  ASSERT_NE(d, nullptr);
  ExpectSequentialWindows(MustNext(*d, 7), tokens, 0);
  EXPECT_TRUE(Contains(d->Describe(), "llm.c v1"));
}

TEST(TokenFileTest, LlmcHeaderVersion2Uint32) {
  const std::vector<uint32_t> tokens = KnownTokens(40, 100000, 60000);
  const std::string path = WriteFile("llmc_v2.bin", LlmcFile(tokens, 2, 40));
  auto d = MustOpen(TokensConfig(path), 13, 160000);
  ASSERT_NE(d, nullptr);
  ExpectSequentialWindows(MustNext(*d, 3), tokens, 0);
}

TEST(TokenFileTest, RawUint32) {
  const std::vector<uint32_t> tokens = KnownTokens(64, 128000, 70000);
  const std::string path = WriteFile("raw32.bin", RawTokens(tokens, 4));
  auto d = MustOpen(TokensConfig(path, TokenDtype::kUint32), 9, 200000);
  ASSERT_NE(d, nullptr);
  ExpectSequentialWindows(MustNext(*d, 7), tokens, 0);
}

TEST(TokenFileTest, EmptyFileIsError) {
  const std::string path = WriteFile("empty.bin", "");
  auto d = OpenDataset(TokensConfig(path), 4, 100, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), path));
  EXPECT_TRUE(Contains(d.status().message(), "empty"));
}

TEST(TokenFileTest, MissingFileIsNotFound) {
  auto d = OpenDataset(TokensConfig(TempPath("does_not_exist.bin")), 4, 100, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(d.status().message(), "does_not_exist.bin"));
}

TEST(TokenFileTest, ShorterThanOneWindowIsError) {
  const std::string path = WriteFile("short.bin", RawTokens(KnownTokens(8, 100), 2));
  auto d = OpenDataset(TokensConfig(path), 8, 100, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), path));
  EXPECT_TRUE(Contains(d.status().message(), "fewer than seq_len + 1 = 9"));
  // Exactly seq_len + 1 tokens is one window.
  auto ok = MustOpen(TokensConfig(path), 7, 100);
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(static_cast<PackedDataset&>(*ok).windows_per_epoch(), 1);
}

TEST(TokenFileTest, OddByteLengthForUint16IsError) {
  std::string bytes = RawTokens(KnownTokens(20, 100), 2);
  bytes.push_back('\x01');
  const std::string path = WriteFile("odd.bin", bytes);
  auto d = OpenDataset(TokensConfig(path), 4, 100, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), path));
  EXPECT_TRUE(Contains(d.status().message(), "41 bytes is not a multiple of the 2-byte"));
  // Length 42 is not a multiple of 4 either.
  bytes.push_back('\x00');
  const std::string path32 = WriteFile("odd32.bin", bytes);
  EXPECT_FALSE(OpenDataset(TokensConfig(path32, TokenDtype::kUint32), 4, 100, 1).ok());
}

TEST(TokenFileTest, LlmcHeaderClaimingMoreTokensIsError) {
  const std::string path = WriteFile("llmc_trunc.bin", LlmcFile(KnownTokens(30, 100), 1, 31));
  auto d = OpenDataset(TokensConfig(path), 4, 100, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), path));
  EXPECT_TRUE(Contains(d.status().message(), "header says 31 tokens"));
  const std::string fewer = WriteFile("llmc_long.bin", LlmcFile(KnownTokens(30, 100), 1, 29));
  EXPECT_FALSE(OpenDataset(TokensConfig(fewer), 4, 100, 1).ok());
}

TEST(TokenFileTest, LlmcUnknownVersionIsError) {
  const std::string path = WriteFile("llmc_v7.bin", LlmcFile(KnownTokens(30, 100), 7, 30));
  auto d = OpenDataset(TokensConfig(path), 4, 100, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), "version 7"));
}

// A name outside uint16/uint32 is refused by the config's parser (train_config_test);
// here a value outside the enumeration (only a cast makes one) is refused too.
TEST(TokenFileTest, UnknownDtypeIsError) {
  const std::string path = WriteFile("dtype.bin", RawTokens(KnownTokens(30, 100), 2));
  auto d = OpenDataset(TokensConfig(path, static_cast<TokenDtype>(7)), 4, 100, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), "token_dtype"));
}

TEST(TokenFileTest, TokenOutOfVocabNamesIndexAtOpen) {
  std::vector<uint32_t> tokens = KnownTokens(100, 500);
  tokens[37] = 500;
  const std::string path = WriteFile("oov.bin", RawTokens(tokens, 2));
  auto d = OpenDataset(TokensConfig(path), 8, 500, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), path));
  EXPECT_TRUE(Contains(d.status().message(), "token 37 "));
  EXPECT_TRUE(Contains(d.status().message(), "is 500, not < vocab_size 500"));
  EXPECT_TRUE(OpenDataset(TokensConfig(path), 8, 501, 1).ok());
}

TEST(TokenFileTest, TokenOutOfVocabNamesIndexLazily) {
  std::vector<uint32_t> tokens = Iota(100);
  tokens[37] = 1000;
  const std::string path = WriteFile("oov_lazy.bin", RawTokens(tokens, 2));
  auto source = OpenTokenFile(path, TokenDtype::kUint16, 200, /*eager_check_bytes=*/0);
  ASSERT_TRUE(source.ok()) << source.status();
  auto d = PackedDataset::Create(*std::move(source), 8, 1, /*shuffle=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectSequentialWindows(MustNext(**d, 4), tokens, 0);  // windows 0..3: tokens 0..32
  auto bad = (*d)->Next(1);                              // window 4: tokens 32..40
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), path));
  EXPECT_TRUE(Contains(bad.status().message(), "token 37 "));
  EXPECT_EQ((*d)->index_in_epoch(), 4);  // unchanged by the failed call
}

// ---- JSON lines ----

TEST(JsonlTest, ArraysAndObjectsConcatenated) {
  const std::string path = WriteFile(
      "docs.jsonl", "[1, 2, 3]\n\n{\"tokens\": [4, 5], \"text\": \"ignored\"}\r\n   \n[6,7,8,9]");
  DataConfig c;
  c.format = DataFormat::kJsonl;
  c.path = path;
  c.shuffle = false;
  auto d = MustOpen(c, 4, 10);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(static_cast<PackedDataset&>(*d).windows_per_epoch(), 2);
  ExpectSequentialWindows(MustNext(*d, 2), {1, 2, 3, 4, 5, 6, 7, 8, 9}, 0);
  EXPECT_TRUE(Contains(d->Describe(), "9 tokens in 3 documents"));
}

TEST(JsonlTest, MalformedLineNamesLineNumber) {
  const std::string path = WriteFile("bad.jsonl", "[1, 2]\n\n[3, 4,\n[5]\n");
  DataConfig c;
  c.format = DataFormat::kJsonl;
  c.path = path;
  auto d = OpenDataset(c, 2, 10, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), path + ":3:"));
  EXPECT_TRUE(Contains(d.status().message(), "not valid JSON"));
}

TEST(JsonlTest, WrongShapesNameLineAndElement) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"[1]\n\"hello\"\n", "x:2: expected an array"},
      {"{\"ids\": [1]}\n", "x:1: object has no \"tokens\" array"},
      {"[1, 2]\n[1, 2.5]\n", "x:2: element 1 (2.5) is not a token id in [0, 10)"},
      {"[1, -1]\n", "x:1: element 1 (-1)"},
      {"[1]\n[2]\n[3, 10]\n", "x:3: element 1 (10)"},
      {"[1, \"2\"]\n", "x:1: element 1"},
  };
  for (const Case& k : cases) {
    auto parsed = ParseJsonlTokens(k.text, "x", 10);
    ASSERT_FALSE(parsed.ok()) << k.text;
    EXPECT_TRUE(Contains(parsed.status().message(), k.expect)) << k.text;
  }
}

TEST(JsonlTest, EmptyOrTooShortIsError) {
  DataConfig c;
  c.format = DataFormat::kJsonl;
  c.path = WriteFile("blank.jsonl", "\n  \n[]\n");
  auto empty = OpenDataset(c, 2, 10, 1);
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(Contains(empty.status().message(), "no tokens"));
  c.path = WriteFile("short.jsonl", "[1, 2]\n[3]\n");
  auto short_one = OpenDataset(c, 3, 10, 1);
  ASSERT_FALSE(short_one.ok());
  EXPECT_TRUE(Contains(short_one.status().message(), "fewer than seq_len + 1 = 4"));
}

// ---- shuffling, epochs, cursors ----

TEST(WindowPermutationTest, IsBijection) {
  for (uint64_t n : {1u, 2u, 3u, 4u, 5u, 16u, 17u, 63u, 1000u, 4097u}) {
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      WindowPermutation p(n, key);
      std::vector<int> hits(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t y = p(i);
        ASSERT_LT(y, n);
        ++hits[y];
      }
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ShuffleTest, EachWindowOncePerEpochDeterministicPerSeed) {
  const int64_t kWindows = 37, kSeqLen = 4;
  const std::string path = WriteFile("iota.bin", RawTokens(Iota(kWindows * kSeqLen + 1), 2));
  auto a = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), kSeqLen, 1000, 42);
  auto b = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), kSeqLen, 1000, 42);
  auto c = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), kSeqLen, 1000, 43);
  ASSERT_TRUE(a && b && c);
  std::vector<int64_t> epoch0 = WindowIds(MustNext(*a, kWindows));
  std::vector<int64_t> epoch1 = WindowIds(MustNext(*a, kWindows));
  for (const auto& order : {epoch0, epoch1}) {
    std::set<int64_t> seen(order.begin(), order.end());
    EXPECT_EQ(seen.size(), static_cast<size_t>(kWindows));
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), kWindows - 1);
  }
  std::vector<int64_t> in_order(kWindows);
  for (int64_t i = 0; i < kWindows; ++i) in_order[i] = i;
  EXPECT_NE(epoch0, in_order);
  EXPECT_NE(epoch0, epoch1);  // a new permutation each epoch
  EXPECT_EQ(WindowIds(MustNext(*b, kWindows)), epoch0);
  EXPECT_NE(WindowIds(MustNext(*c, kWindows)), epoch0);
  // Rows are whole windows even when shuffled: targets are the inputs shifted by one.
  TokenBatch batch = MustNext(*b, 5);
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t j = 0; j < kSeqLen; ++j) {
      EXPECT_EQ(batch.targets[r * kSeqLen + j], batch.inputs[r * kSeqLen + j] + 1);
    }
  }
}

TEST(ShuffleTest, UnshuffledEpochWraps) {
  const std::vector<uint32_t> tokens = KnownTokens(41, 100);  // 5 windows of 8
  const std::string path = WriteFile("wrap.bin", RawTokens(tokens, 2));
  auto d = MustOpen(TokensConfig(path), 8, 100);
  ASSERT_NE(d, nullptr);
  auto& packed = static_cast<PackedDataset&>(*d);
  ASSERT_EQ(packed.windows_per_epoch(), 5);
  TokenBatch b = MustNext(*d, 7);  // windows 0..4 of epoch 0, then 0..1 of epoch 1
  const int64_t T = 8;
  for (int64_t r = 0; r < 7; ++r) {
    const int64_t w = r % 5;
    for (int64_t j = 0; j < T; ++j) {
      ASSERT_EQ(b.inputs[r * T + j], static_cast<int32_t>(tokens[w * T + j]));
      ASSERT_EQ(b.targets[r * T + j], static_cast<int32_t>(tokens[w * T + j + 1]));
    }
  }
  EXPECT_EQ(packed.epoch(), 1);
  EXPECT_EQ(packed.index_in_epoch(), 2);
}

TEST(ShuffleTest, ShuffledEpochWrapsToNewPermutation) {
  const std::string path = WriteFile("iota_wrap.bin", RawTokens(Iota(10 * 3 + 1), 2));
  auto a = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), 3, 100, 7);
  auto b = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), 3, 100, 7);
  ASSERT_TRUE(a && b);
  std::vector<int64_t> whole = WindowIds(MustNext(*a, 25));  // 2.5 epochs in one call
  std::vector<int64_t> pieces;
  for (int64_t rows : {4, 9, 1, 11}) {
    for (int64_t id : WindowIds(MustNext(*b, rows))) pieces.push_back(id);
  }
  EXPECT_EQ(whole, pieces);
  for (int e = 0; e < 2; ++e) {
    std::set<int64_t> seen(whole.begin() + 10 * e, whole.begin() + 10 * (e + 1));
    EXPECT_EQ(seen.size(), 10u) << "epoch " << e;
  }
}

TEST(CursorTest, RestoreContinuesIdentically) {
  const std::string path = WriteFile("cursor.bin", RawTokens(Iota(23 * 5 + 3), 2));
  const DataConfig config = TokensConfig(path, TokenDtype::kUint16, true);
  auto reference = MustOpen(config, 5, 1000, 99);
  ASSERT_NE(reference, nullptr);
  MustNext(*reference, 23 + 17);  // epoch 1, window 17 of 23
  const std::string cursor = reference->Cursor();
  ASSERT_EQ(static_cast<PackedDataset&>(*reference).epoch(), 1);
  std::vector<TokenBatch> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(MustNext(*reference, 4));  // into epoch 2

  auto resumed = MustOpen(config, 5, 1000, 99);
  ASSERT_NE(resumed, nullptr);
  ASSERT_TRUE(resumed->Restore(cursor).ok()) << resumed->Restore(cursor);
  EXPECT_EQ(resumed->Cursor(), cursor);
  for (int i = 0; i < 6; ++i) {
    TokenBatch got = MustNext(*resumed, 4);
    EXPECT_EQ(got.inputs, expected[i].inputs) << "batch " << i;
    EXPECT_EQ(got.targets, expected[i].targets) << "batch " << i;
  }
  EXPECT_EQ(resumed->Cursor(), reference->Cursor());
}

TEST(CursorTest, RestoreSyntheticMidEpoch) {
  DataConfig config;  // synthetic, shuffled
  auto a = MustOpen(config, 64, 512, 5);
  auto b = MustOpen(config, 64, 512, 5);
  ASSERT_TRUE(a && b);
  MustNext(*a, 3);
  ASSERT_TRUE(b->Restore(a->Cursor()).ok());
  EXPECT_EQ(MustNext(*a, 2).inputs, MustNext(*b, 2).inputs);
}

TEST(CursorTest, MismatchedOrMalformedCursorIsRejected) {
  const std::string path = WriteFile("cursor2.bin", RawTokens(Iota(200), 2));
  auto d = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), 8, 1000, 1);
  ASSERT_NE(d, nullptr);
  MustNext(*d, 3);
  const std::string before = d->Cursor();

  auto other_seed = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), 8, 1000, 2);
  absl::Status s = d->Restore(other_seed->Cursor());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "seed 2"));

  auto other_len = MustOpen(TokensConfig(path, TokenDtype::kUint16, true), 9, 1000, 1);
  s = d->Restore(other_len->Cursor());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "seq_len 9"));

  const std::string shorter = WriteFile("cursor3.bin", RawTokens(Iota(150), 2));
  auto other_file = MustOpen(TokensConfig(shorter, TokenDtype::kUint16, true), 8, 1000, 1);
  s = d->Restore(other_file->Cursor());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "windows per epoch 18"));

  auto unshuffled = MustOpen(TokensConfig(path, TokenDtype::kUint16, false), 8, 1000, 1);
  EXPECT_FALSE(d->Restore(unshuffled->Cursor()).ok());

  auto edit = [&](const std::string& from, const std::string& to) {
    return absl::StrReplaceAll(before, {{from, to}});
  };
  ASSERT_TRUE(Contains(before, "\"index\":3,"));
  for (const std::string& bad :
       {std::string(), std::string("garbage"), std::string("{}"), std::string("[1,2]"),
        edit("\"version\":1", "\"version\":2"), edit("\"index\":3", "\"index\":24"),
        edit("\"epoch\":0", "\"epoch\":-1"), edit("\"seed\":1", "\"seed\":-1"),
        edit("\"seed\":1", "\"seed\":\"1\""), edit(",\"shuffle\":true", ""),
        edit("slidedp.data", "other")}) {
    ASSERT_NE(bad, before);
    s = d->Restore(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(d->Cursor(), before);  // every failed Restore left the position alone
}

TEST(CursorTest, SerializeRoundTrip) {
  DataCursor c;
  c.epoch = 3;
  c.index = 17;
  c.seed = 0xfedcba9876543210ULL;
  c.windows = 1000;
  c.seq_len = 2048;
  c.shuffle = true;
  auto parsed = ParseDataCursor(SerializeDataCursor(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->epoch, 3);
  EXPECT_EQ(parsed->index, 17);
  EXPECT_EQ(parsed->seed, c.seed);
  EXPECT_EQ(parsed->windows, 1000);
  EXPECT_EQ(parsed->seq_len, 2048);
  EXPECT_TRUE(parsed->shuffle);
}

TEST(DatasetTest, BadArgumentsAreErrors) {
  DataConfig synthetic;
  EXPECT_FALSE(OpenDataset(synthetic, 0, 100, 1).ok());
  EXPECT_FALSE(OpenDataset(synthetic, 16, 0, 1).ok());
  DataConfig unknown;
  unknown.format = static_cast<DataFormat>(99);  // only a cast makes one
  unknown.path = "/x";
  auto s = OpenDataset(unknown, 16, 100, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "data.format 99 is not one of synthetic, tokens")) << s.status();
  DataConfig no_path;
  no_path.format = DataFormat::kTokens;
  s = OpenDataset(no_path, 16, 100, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "data.path"));
  auto d = MustOpen(synthetic, 16, 100);
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->Next(0).ok());
  EXPECT_FALSE(d->Next(-1).ok());
  EXPECT_FALSE(d->Next(kMaxBatchTokens).ok());
}

// ---- synthetic corpus ----

TEST(SyntheticTest, DeterministicAndInRange) {
  DataConfig config;
  for (int64_t vocab : {1, 3, 100, 151936}) {
    auto a = MustOpen(config, 32, vocab, 11);
    auto b = MustOpen(config, 32, vocab, 11);
    ASSERT_TRUE(a && b);
    TokenBatch x = MustNext(*a, 8), y = MustNext(*b, 8);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.targets, y.targets);
    for (size_t i = 0; i < x.inputs.size(); ++i) {
      ASSERT_GE(x.inputs[i], 0);
      ASSERT_LT(x.inputs[i], vocab);
      ASSERT_GE(x.targets[i], 0);
      ASSERT_LT(x.targets[i], vocab);
    }
  }
  auto a = MustOpen(config, 32, 1000, 11);
  auto c = MustOpen(config, 32, 1000, 12);
  EXPECT_NE(MustNext(*a, 4).inputs, MustNext(*c, 4).inputs);
  EXPECT_TRUE(Contains(a->Describe(), "synthetic"));
}

TEST(SyntheticTest, RandomAccessAgreesWithStream) {
  SyntheticCorpus corpus(3, 1000);
  std::vector<int32_t> all(3 * kSyntheticBlock);
  ASSERT_TRUE(corpus.Read(0, absl::MakeSpan(all)).ok());
  for (int64_t start : {int64_t{0}, int64_t{5}, kSyntheticBlock - 3, 2 * kSyntheticBlock + 1}) {
    std::vector<int32_t> part(kSyntheticBlock / 2 + 7);
    const int64_t n = std::min<int64_t>(part.size(), all.size() - start);
    part.resize(n);
    ASSERT_TRUE(corpus.Read(start, absl::MakeSpan(part)).ok());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + start)) << start;
  }
  // Within a block, every step follows one of the token's successors.
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(all.size()); ++i) {
    if ((i + 1) % kSyntheticBlock == 0) continue;  // a new block starts afresh
    bool follows = false;
    for (int k = 0; k < kSyntheticFanout; ++k) follows |= corpus.Successor(all[i], k) == all[i + 1];
    ASSERT_TRUE(follows) << i;
  }
  std::vector<int32_t> tail(2);
  EXPECT_FALSE(corpus.Read(corpus.size() - 1, absl::MakeSpan(tail)).ok());
  EXPECT_FALSE(corpus.Read(-1, absl::MakeSpan(tail)).ok());
}

TEST(SyntheticTest, NextTokenIsPredictable) {
  const int64_t vocab = 512;
  SyntheticCorpus corpus(1234, vocab);
  std::vector<int32_t> stream(int64_t{1} << 18);
  ASSERT_TRUE(corpus.Read(1000, absl::MakeSpan(stream)).ok());
  std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
  std::map<int32_t, int64_t> firsts, unigram;
  for (size_t i = 0; i + 1 < stream.size(); ++i) {
    ++pairs[{stream[i], stream[i + 1]}];
    ++firsts[stream[i]];
    ++unigram[stream[i]];
  }
  const double n = static_cast<double>(stream.size() - 1);
  double conditional = 0, marginal = 0;
  for (const auto& [pair, count] : pairs) {
    conditional -= count / n * std::log(static_cast<double>(count) / firsts[pair.first]);
  }
  for (const auto& [token, count] : unigram) marginal -= count / n * std::log(count / n);
  // Theory: 1.75 bits = 1.21 nats given the previous token; log(512) = 6.24 nats, and the
  // 128 active tokens have a marginal entropy near log(128) = 4.85.
  EXPECT_LT(conditional, 1.4);
  EXPECT_GT(conditional, 1.0);  // not degenerate either
  EXPECT_LT(conditional, 0.3 * std::log(static_cast<double>(vocab)));
  EXPECT_GT(marginal, 4.0);  // many tokens in use: the model must learn transitions
  EXPECT_EQ(corpus.active_tokens(), kSyntheticMaxActive);
}

}  // namespace
}  // namespace slidedp
