// PackedDataset: see packed_dataset.h.
#include "runtime/data/packed_dataset.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/data/window_permutation.h"

namespace slidedp {

absl::StatusOr<std::unique_ptr<PackedDataset>> PackedDataset::Create(
    std::unique_ptr<TokenSource> source, int64_t seq_len, uint64_t seed, bool shuffle) {
  if (seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("seq_len %d is not >= 1", seq_len));
  }
  if (source->size() < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d tokens are fewer than seq_len + 1 = %d, the length of one training window",
        source->Describe(), source->size(), seq_len + 1));
  }
  return std::unique_ptr<PackedDataset>(
      new PackedDataset(std::move(source), seq_len, seed, shuffle));
}

PackedDataset::PackedDataset(std::unique_ptr<TokenSource> source, int64_t seq_len, uint64_t seed,
                             bool shuffle)
    : source_(std::move(source)),
      seq_len_(seq_len),
      seed_(seed),
      shuffle_(shuffle),
      windows_((source_->size() - 1) / seq_len) {}

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
  std::vector<int32_t> window(seq_len_ + 1);
  int64_t epoch = epoch_, index = index_;
  for (int64_t r = 0; r < rows; ++r) {
    absl::Status s = source_->Read(WindowStart(epoch, index), absl::MakeSpan(window));
    if (!s.ok()) return s;
    std::copy_n(window.begin(), seq_len_, batch.inputs.begin() + r * seq_len_);
    std::copy_n(window.begin() + 1, seq_len_, batch.targets.begin() + r * seq_len_);
    if (++index == windows_) {
      index = 0;
      ++epoch;
    }
  }
  epoch_ = epoch;
  index_ = index;
  return batch;
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
  return absl::StrFormat("%s; %s windows of %d per epoch, %s", source_->Describe(),
                         FormatTokenCount(windows_), seq_len_, shuffle_ ? "shuffled" : "in order");
}

}  // namespace slidedp
