// OpenDataset: picks the token source for DataConfig::format and packs it (see
// packed_dataset.h for the windows, shuffle and cursor). Trainer's thread.
#include "runtime/data/dataset.h"

#include "absl/strings/str_format.h"
#include "runtime/data/jsonl_tokens.h"
#include "runtime/data/packed_dataset.h"
#include "runtime/data/synthetic_corpus.h"
#include "runtime/data/text_dataset.h"
#include "runtime/data/text_records.h"
#include "runtime/data/token_file.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

absl::StatusOr<std::unique_ptr<TokenSource>> OpenSource(const DataConfig& data,
                                                        const std::string& path,
                                                        const DataModel& model, uint64_t seed,
                                                        const StopToken* stop) {
  if (data.format == DataFormat::kSynthetic) {
    return std::unique_ptr<TokenSource>(new SyntheticCorpus(seed, model.vocab_size));
  }
  if (*NameOf(data.format) == '\0') {
    return absl::InvalidArgumentError(absl::StrFormat("data.format %d is not one of %s",
                                                      static_cast<int>(data.format), EnumNameList<DataFormat>()));
  }
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data.path is required for data.format \"%s\"", NameOf(data.format)));
  }
  if (data.format == DataFormat::kTokens) return OpenTokenFile(path, data.token_dtype, model.vocab_size);
  if (data.format == DataFormat::kJsonl) return LoadJsonlTokens(path, model.vocab_size, stop);
  CorpusOptions options;  // the text formats
  options.stop = stop;
  return OpenTextSource(data, path, model, options);
}

absl::StatusOr<std::unique_ptr<Dataset>> Open(const DataConfig& data, const std::string& path,
                                              const DataModel& model, int64_t seq_len,
                                              uint64_t seed, bool shuffle, const StopToken* stop) {
  if (seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("seq_len %d is not >= 1", seq_len));
  }
  if (model.vocab_size < 1 || model.vocab_size > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocab_size %d is not in [1, 2^31]", model.vocab_size));
  }
  absl::StatusOr<std::unique_ptr<TokenSource>> source = OpenSource(data, path, model, seed, stop);
  if (!source.ok()) return source.status();
  absl::StatusOr<std::unique_ptr<PackedDataset>> dataset =
      PackedDataset::Create(*std::move(source), seq_len, seed, shuffle, data.document_mask);
  if (!dataset.ok()) return dataset.status();
  return std::unique_ptr<Dataset>(*std::move(dataset));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& data, const DataModel& model,
                                                     int64_t seq_len, uint64_t seed, const StopToken* stop) {
  return Open(data, data.path, model, seq_len, seed, data.shuffle, stop);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& data, int64_t seq_len,
                                                     int64_t vocab_size, uint64_t seed) {
  DataModel model;
  model.vocab_size = vocab_size;
  return OpenDataset(data, model, seq_len, seed);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenEvalDataset(const DataConfig& data,
                                                         const DataModel& model, int64_t seq_len,
                                                         uint64_t seed, const StopToken* stop) {
  if (data.eval_path.empty()) {
    return absl::FailedPreconditionError("data.eval_path is not set: there is no evaluation data");
  }
  return Open(data, data.eval_path, model, seq_len, seed, /*shuffle=*/false, stop);
}

}  // namespace slidedp
