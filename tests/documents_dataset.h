// DocumentsDataset: a test Dataset that marks documents in another dataset's rows, for
// document masking (TokenBatch::positions). A document starts at each input token whose
// id is a multiple of 5; the first document of row r continues one that began
// (r * 7) % 23 tokens before the row (positions past seq_len occur). Deterministic: two
// instances over equal datasets give equal batches. Trainer's thread, as any Dataset.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "runtime/data/dataset.h"

namespace slidedp::testing {

class DocumentsDataset final : public Dataset {
 public:
  explicit DocumentsDataset(std::unique_ptr<Dataset> rows) : rows_(std::move(rows)) {}

  absl::StatusOr<TokenBatch> Next(int64_t rows) override {
    absl::StatusOr<TokenBatch> b = rows_->Next(rows);
    if (!b.ok()) return b;
    b->positions.resize(b->inputs.size());
    for (int64_t r = 0; r < b->rows; ++r) {
      int32_t pos = static_cast<int32_t>((r * 7) % 23);
      for (int64_t t = 0; t < b->seq_len; ++t, ++pos) {
        const size_t i = static_cast<size_t>(r * b->seq_len + t);
        if (t > 0 && b->inputs[i] % 5 == 0) pos = 0;
        b->positions[i] = pos;
      }
    }
    return b;
  }
  std::string Cursor() const override { return rows_->Cursor(); }
  absl::Status Restore(const std::string& cursor) override { return rows_->Restore(cursor); }
  std::string Describe() const override { return "documents in " + rows_->Describe(); }

 private:
  std::unique_ptr<Dataset> rows_;
};

// OpenDataset(data, ...) with documents marked.
inline std::unique_ptr<Dataset> OpenDocuments(const DataConfig& data, int64_t seq_len, int64_t vocab_size,
                                              uint64_t seed) {
  absl::StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(data, seq_len, vocab_size, seed);
  if (!d.ok()) return nullptr;
  return std::make_unique<DocumentsDataset>(*std::move(d));
}

}  // namespace slidedp::testing
