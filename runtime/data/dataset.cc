// OpenDataset: picks the token source for DataConfig::format and packs it (see
// packed_dataset.h for the windows, shuffle and cursor). Trainer's thread.
#include "runtime/data/dataset.h"

#include "absl/strings/str_format.h"
#include "runtime/data/jsonl_tokens.h"
#include "runtime/data/packed_dataset.h"
#include "runtime/data/synthetic_corpus.h"
#include "runtime/data/token_file.h"

namespace slidedp {
namespace {

absl::StatusOr<std::unique_ptr<TokenSource>> OpenSource(const DataConfig& data, int64_t vocab_size,
                                                        uint64_t seed) {
  if (data.format == "synthetic") {
    return std::unique_ptr<TokenSource>(new SyntheticCorpus(seed, vocab_size));
  }
  if (data.path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data.path is required for data.format \"%s\"", data.format));
  }
  if (data.format == "tokens") return OpenTokenFile(data.path, data.token_dtype, vocab_size);
  if (data.format == "jsonl") return LoadJsonlTokens(data.path, vocab_size);
  return absl::InvalidArgumentError(
      absl::StrFormat("data.format \"%s\" is not synthetic, tokens or jsonl", data.format));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& data, int64_t seq_len,
                                                     int64_t vocab_size, uint64_t seed) {
  if (seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("seq_len %d is not >= 1", seq_len));
  }
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocab_size %d is not in [1, 2^31]", vocab_size));
  }
  absl::StatusOr<std::unique_ptr<TokenSource>> source = OpenSource(data, vocab_size, seed);
  if (!source.ok()) return source.status();
  absl::StatusOr<std::unique_ptr<PackedDataset>> dataset =
      PackedDataset::Create(*std::move(source), seq_len, seed, data.shuffle);
  if (!dataset.ok()) return dataset.status();
  return std::unique_ptr<Dataset>(*std::move(dataset));
}

}  // namespace slidedp
