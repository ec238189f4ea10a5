// libFuzzer entry point for the text JSON-lines reader (text_records, document_encoder,
// corpus_tokenizer): the first byte picks the format (text, prompt_completion, chat)
// and the chat style (ChatML, Llama 3; with bit 7, the SentencePiece-style stories260K
// tokenizer with Llama 2's or Mistral's [INST]), the rest is a file tokenized with the
// fixture tokenizers. What fails names the file; what succeeds holds ids inside the
// vocabulary, one flag byte per id with only known bits, and one document start per
// document. Built and run by deploy/fuzz.sh from the repository root (the tokenizers
// are read from tests/reference/fixtures/tokenizer/).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "runtime/data/corpus_tokenizer.h"
#include "runtime/data/token_source.h"

namespace {

const slidedp::Tokenizer& Load(const char* family) {
  auto tok = slidedp::Tokenizer::Load(std::string("tests/reference/fixtures/tokenizer/") + family);
  if (!tok.ok()) {
    std::fprintf(stderr, "run from the repository root: %s\n", std::string(tok.status().message()).c_str());
    __builtin_trap();
  }
  return *tok->release();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const slidedp::Tokenizer& qwen = Load("qwen2");
  static const slidedp::Tokenizer& llama = Load("llama3");
  static const slidedp::Tokenizer& stories = Load("stories260k");
  if (size == 0) return 0;
  const bool use_llama = data[0] & 4;
  const bool sentencepiece = data[0] & 128;
  const auto format = static_cast<slidedp::TextFormat>(data[0] % 3);
  const slidedp::Tokenizer& tok = sentencepiece ? stories : use_llama ? llama : qwen;
  const slidedp::ModelFamily family =
      sentencepiece ? (use_llama ? slidedp::ModelFamily::kLlama : slidedp::ModelFamily::kMistral)
                    : (use_llama ? slidedp::ModelFamily::kLlama : slidedp::ModelFamily::kQwen2);
  auto encoder = slidedp::DocumentEncoder::Create(tok, format, family);
  if (!encoder.ok()) __builtin_trap();  // the fixtures have every special token
  slidedp::CorpusOptions options;
  options.threads = 1;
  options.progress = false;
  options.skip_bad_lines = data[0] & 8;
  options.chunk_bytes = 1 + ((data[0] >> 4) & 7) * 64;
  absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<slidedp::TokenizedCorpus> r = slidedp::TokenizeCorpus(text, "fuzz.jsonl", *encoder, options);
  if (!r.ok()) {
    if (r.status().message().find("fuzz.jsonl") == std::string::npos) __builtin_trap();
    return 0;
  }
  const int64_t vocab = tok.vocab_size();
  if (r->ids.size() != r->flags.size() || r->documents < 1) __builtin_trap();
  int64_t starts = 0;
  for (size_t i = 0; i < r->ids.size(); ++i) {
    if (r->ids[i] < 0 || r->ids[i] >= vocab || r->ids[i] > r->max_id) __builtin_trap();
    if (r->flags[i] & ~(slidedp::kTokenLoss | slidedp::kTokenDocumentStart)) __builtin_trap();
    starts += (r->flags[i] & slidedp::kTokenDocumentStart) != 0;
  }
  if (starts != r->documents || !(r->flags[0] & slidedp::kTokenDocumentStart)) __builtin_trap();
  return 0;
}
