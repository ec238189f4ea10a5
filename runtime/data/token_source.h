// TokenSource: a finite, random-access stream of token ids (a mapped token file, parsed
// JSON lines, tokenized text, or the synthetic corpus) that PackedDataset cuts into
// windows, with optional per-token flags (loss mask, document starts). Also the
// in-memory source. Used from the trainer's thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace slidedp {

// Per-token flags (TokenSource::ReadFlags), one byte a token.
enum TokenFlag : uint8_t {
  // The token is trained as a target (the loss of predicting it from the tokens before).
  kTokenLoss = 1,
  // The token is the first of a document.
  kTokenDocumentStart = 2,
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;

  // Number of tokens in the stream (> 0 for any source a factory returns).
  virtual int64_t size() const = 0;

  // Copies tokens [start, start + out.size()) into `out`. OutOfRange if the range is not
  // inside [0, size()); InvalidArgument naming the file and token index if a token is
  // not < the vocabulary size the source was opened with.
  virtual absl::Status Read(int64_t start, absl::Span<int32_t> out) const = 0;

  // For logs, e.g. "tokens /data/x.bin (12.3M tokens, uint16)".
  virtual std::string Describe() const = 0;

  // Whether ReadFlags knows more than "every token is a target, no documents".
  virtual bool has_flags() const { return false; }

  // Copies the TokenFlag bits of tokens [start, start + out.size()) into `out`.
  // OutOfRange as Read. Without flags: kTokenLoss everywhere.
  virtual absl::Status ReadFlags(int64_t start, absl::Span<uint8_t> out) const;
};

// A stream held in memory (parsed JSON lines, tokenized text, tests). Tokens are
// trusted: the producer has checked them against the vocabulary. `flags` is empty (no
// flags) or holds one TokenFlag byte per token.
class InMemoryTokenSource final : public TokenSource {
 public:
  InMemoryTokenSource(std::vector<int32_t> tokens, std::string description,
                      std::vector<uint8_t> flags = {})
      : tokens_(std::move(tokens)), flags_(std::move(flags)), description_(std::move(description)) {}

  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  absl::Status Read(int64_t start, absl::Span<int32_t> out) const override;
  std::string Describe() const override { return description_; }
  bool has_flags() const override { return !flags_.empty(); }
  absl::Status ReadFlags(int64_t start, absl::Span<uint8_t> out) const override;

 private:
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> flags_;
  std::string description_;
};

// OutOfRange unless 0 <= start and start + count <= size; `what` names the source.
absl::Status CheckTokenRange(int64_t start, int64_t count, int64_t size, const std::string& what);

// "950", "12.3K", "4.5M", "1.1G": compact counts for descriptions.
std::string FormatTokenCount(int64_t n);

}  // namespace slidedp
