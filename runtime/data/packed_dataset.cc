// PackedDataset: see packed_dataset.h.
#include "runtime/data/packed_dataset.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/data/window_permutation.h"

namespace slidedp {

absl::StatusOr<std::unique_ptr<PackedDataset>> PackedDataset::Create(
    std::unique_ptr<TokenSource> source, int64_t seq_len, uint64_t seed, bool shuffle,
    bool document_mask) {
  if (seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("seq_len %d is not >= 1", seq_len));
  }
  if (source->size() < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d tokens are fewer than seq_len + 1 = %d, the length of one training window",
        source->Describe(), source->size(), seq_len + 1));
  }
  if (document_mask && !source->has_flags()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data.document_mask: %s has no document boundaries (formats jsonl, text, "
        "prompt_completion and chat have them)",
        source->Describe()));
  }
  return std::unique_ptr<PackedDataset>(
      new PackedDataset(std::move(source), seq_len, seed, shuffle, document_mask));
}

PackedDataset::PackedDataset(std::unique_ptr<TokenSource> source, int64_t seq_len, uint64_t seed,
                             bool shuffle, bool document_mask)
    : source_(std::move(source)),
      seq_len_(seq_len),
      seed_(seed),
      shuffle_(shuffle),
      document_mask_(document_mask),
      windows_((source_->size() - 1) / seq_len),
      window_(seq_len + 1),
      flags_(source_->has_flags() ? seq_len + 1 : 0) {}

int64_t PackedDataset::WindowStart(int64_t epoch, int64_t index) const {
  if (!shuffle_) return index * seq_len_;
  const WindowPermutation order(static_cast<uint64_t>(windows_), EpochShuffleKey(seed_, epoch));
  return static_cast<int64_t>(order(static_cast<uint64_t>(index))) * seq_len_;
}

absl::StatusOr<TokenBatch> PackedDataset::Next(int64_t rows) {
  if (rows < 1 || rows > kMaxBatchTokens / seq_len_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Next(%d): rows must be in [1, %d] for seq_len %d", rows,
                        kMaxBatchTokens / seq_len_, seq_len_));
  }
  TokenBatch batch;
  batch.rows = rows;
  batch.seq_len = seq_len_;
  batch.inputs.resize(rows * seq_len_);
  batch.targets.resize(rows * seq_len_);
  if (document_mask_) batch.positions.resize(rows * seq_len_);
  int64_t epoch = epoch_, index = index_;
  for (int64_t r = 0; r < rows; ++r) {
    absl::Status s = FillRow(WindowStart(epoch, index), r, batch);
    if (!s.ok()) return s;
    if (++index == windows_) {
      index = 0;
      ++epoch;
    }
  }
  epoch_ = epoch;
  index_ = index;
  return batch;
}

absl::Status PackedDataset::FillRow(int64_t start, int64_t r, TokenBatch& batch) {
  absl::Status s = source_->Read(start, absl::MakeSpan(window_));
  if (!s.ok()) return s;
  int32_t* inputs = batch.inputs.data() + r * seq_len_;
  int32_t* targets = batch.targets.data() + r * seq_len_;
  std::copy_n(window_.begin(), seq_len_, inputs);
  std::copy_n(window_.begin() + 1, seq_len_, targets);
  if (flags_.empty()) return absl::OkStatus();
  s = source_->ReadFlags(start, absl::MakeSpan(flags_));
  if (!s.ok()) return s;
  const uint8_t cut = document_mask_ ? kTokenDocumentStart : 0;
  for (int64_t j = 0; j < seq_len_; ++j) {
    const uint8_t f = flags_[j + 1];
    if (!(f & kTokenLoss) || (f & cut)) targets[j] = kIgnoreIndex;
  }
  if (!document_mask_) return absl::OkStatus();
  int32_t* positions = batch.positions.data() + r * seq_len_;
  positions[0] = 0;
  for (int64_t j = 1; j < seq_len_; ++j) {
    positions[j] = (flags_[j] & kTokenDocumentStart) ? 0 : positions[j - 1] + 1;
  }
  return absl::OkStatus();
}

DataCursor PackedDataset::Identity() const {
  DataCursor c;
  c.epoch = epoch_;
  c.index = index_;
  c.seed = seed_;
  c.windows = windows_;
  c.seq_len = seq_len_;
  c.shuffle = shuffle_;
  return c;
}

std::string PackedDataset::Cursor() const { return SerializeDataCursor(Identity()); }

absl::Status PackedDataset::Restore(const std::string& cursor) {
  absl::StatusOr<DataCursor> saved = ParseDataCursor(cursor);
  if (!saved.ok()) return saved.status();
  absl::Status match = CheckCursorMatches(*saved, Identity());
  if (!match.ok()) return match;
  epoch_ = saved->epoch;
  index_ = saved->index;
  return absl::OkStatus();
}

std::string PackedDataset::Describe() const {
  return absl::StrFormat("%s; %s windows of %d per epoch, %s%s", source_->Describe(),
                         FormatTokenCount(windows_), seq_len_, shuffle_ ? "shuffled" : "in order",
                         document_mask_ ? ", document positions" : "");
}

}  // namespace slidedp
