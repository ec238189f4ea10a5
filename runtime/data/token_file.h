// Token files: flat binary token streams as nanoGPT and llm.c write them, memory-mapped
// read-only.
//   nanoGPT: raw little-endian uint16 (or uint32) tokens, no header (train.bin).
//   llm.c:   a header of 256 little-endian int32 (magic 20240520, version 1 = uint16
//            tokens or 2 = uint32 tokens, token count), then the tokens.
// The llm.c header is recognized by its magic (and then decides the token width);
// anything else is raw tokens of the configured dtype. Used from the trainer's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/data/token_source.h"
#include "runtime/train_config_enums.h"

namespace slidedp {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;

// Files up to this size have every token checked against the vocabulary when opened;
// larger ones are checked as each window is read (Read fails naming the token).
inline constexpr int64_t kTokenFileEagerCheckBytes = int64_t{256} << 20;

// Opens `path`. `token_dtype` (uint16 or uint32) applies to raw files. Errors
// (each naming the file): missing, empty, size not a multiple of the token size, llm.c
// header with an unknown version or a token count that disagrees with the file size,
// and (for files up to kTokenFileEagerCheckBytes) a token id >= vocab_size, naming its
// index. vocab_size must be in [1, 2^31]. Files larger than `eager_check_bytes` are
// checked lazily by Read instead (tests lower it).
absl::StatusOr<std::unique_ptr<TokenSource>> OpenTokenFile(
    const std::string& path, TokenDtype token_dtype, int64_t vocab_size,
    int64_t eager_check_bytes = kTokenFileEagerCheckBytes);

}  // namespace slidedp
