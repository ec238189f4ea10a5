// PackedDataset: the Dataset over any TokenSource. The stream of N tokens is cut into
// W = (N - 1) / seq_len windows of seq_len + 1 tokens; window w starts at token
// w * seq_len, so consecutive windows share one token (the last target of one window is
// the first input of the next) and every token but the last of a partial tail is a
// target exactly once per epoch. Row inputs = window[0, seq_len), targets =
// window[1, seq_len]. Epoch e visits the windows in the order WindowPermutation(W,
// EpochShuffleKey(seed, e)) (a fresh permutation per epoch, no O(W) memory), or in file
// order without shuffle; after the last window of an epoch comes the first of the next.
// Flags (token_source.h) travel with the tokens: a target whose token lacks kTokenLoss
// becomes kIgnoreIndex. With document_mask, TokenBatch.positions holds each input's
// position in its document, restarting at 0 at a document start and at the first token
// of every row (a window that begins inside a document counts its first token as
// position 0: positions stay below seq_len and RoPE is relative, so nothing is lost);
// a target that starts a document is kIgnoreIndex there (the model, seeing only the
// previous document, cannot predict it). Used from the trainer's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/data/data_cursor.h"
#include "runtime/data/dataset.h"
#include "runtime/data/token_source.h"

namespace slidedp {

// Largest batch Next() returns, in tokens (rows * seq_len).
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 30;

class PackedDataset final : public Dataset {
 public:
  // seq_len >= 1. InvalidArgument naming the source if it holds fewer than seq_len + 1
  // tokens, or if document_mask is asked of a source without flags (no documents).
  // The position starts at epoch 0, window 0.
  static absl::StatusOr<std::unique_ptr<PackedDataset>> Create(std::unique_ptr<TokenSource> source,
                                                               int64_t seq_len, uint64_t seed,
                                                               bool shuffle,
                                                               bool document_mask = false);

  // rows >= 1 and rows * seq_len <= kMaxBatchTokens, else InvalidArgument. On an error
  // from the source (a token outside the vocabulary) the position is unchanged.
  absl::StatusOr<TokenBatch> Next(int64_t rows) override;

  // See data_cursor.h for the format.
  std::string Cursor() const override;

  // Positions exactly at `cursor`. InvalidArgument if it does not parse,
  // FailedPrecondition if it was saved for a dataset with another seed, window count,
  // seq_len or shuffle setting; the position is unchanged on error.
  absl::Status Restore(const std::string& cursor) override;

  std::string Describe() const override;

  int64_t windows_per_epoch() const { return windows_; }
  int64_t epoch() const { return epoch_; }
  int64_t index_in_epoch() const { return index_; }

  // The token offset where the window visited `index`-th in epoch `epoch` starts.
  // Preconditions: epoch >= 0, 0 <= index < windows_per_epoch().
  int64_t WindowStart(int64_t epoch, int64_t index) const;

 private:
  PackedDataset(std::unique_ptr<TokenSource> source, int64_t seq_len, uint64_t seed, bool shuffle,
                bool document_mask);
  DataCursor Identity() const;
  // Writes row `r` of `batch` from the window of seq_len + 1 tokens at `start`.
  absl::Status FillRow(int64_t start, int64_t r, TokenBatch& batch);

  std::unique_ptr<TokenSource> source_;
  int64_t seq_len_;
  uint64_t seed_;
  bool shuffle_;
  bool document_mask_;
  int64_t windows_;
  std::vector<int32_t> window_;  // scratch of seq_len + 1 ids
  std::vector<uint8_t> flags_;   // and their flags
  int64_t epoch_ = 0;
  int64_t index_ = 0;  // next window of the epoch, in [0, windows_)
};

}  // namespace slidedp
