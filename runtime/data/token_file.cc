// Token files: see token_file.h. The mapping is read token by token, byte-wise little
// endian, so neither alignment nor host byte order matters.
#include "runtime/data/token_file.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/data/data_file_mapping.h"
#include "runtime/io/file_access.h"
#include "runtime/io/user_text.h"

namespace slidedp {
namespace {

struct Layout {
  int64_t header_bytes = 0;  // 0 (raw) or kLlmcHeaderBytes
  int width = 2;             // bytes per token
  int64_t count = 0;         // tokens
  std::string kind;          // for Describe, e.g. "llm.c v1, uint16"
};

int32_t ReadInt32LE(const uint8_t* p) {
  const uint32_t u =
      uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  return static_cast<int32_t>(u);
}

bool HasLlmcMagic(const DataFileMapping& file) {
  return static_cast<int64_t>(file.size()) >= kLlmcHeaderBytes &&
         ReadInt32LE(file.data()) == kLlmcMagic;
}

absl::StatusOr<Layout> LlmcLayout(const DataFileMapping& file) {
  const int32_t version = ReadInt32LE(file.data() + 4);
  const int64_t count = ReadInt32LE(file.data() + 8);
  Layout layout;
  layout.header_bytes = kLlmcHeaderBytes;
  if (version != 1 && version != 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: llm.c header version %d is not supported (1: uint16 tokens, 2: uint32 tokens)",
        EchoPath(file.path()), version));
  }
  layout.width = version == 1 ? 2 : 4;
  layout.kind = version == 1 ? "llm.c v1, uint16" : "llm.c v2, uint32";
  const int64_t body = static_cast<int64_t>(file.size()) - kLlmcHeaderBytes;
  if (count < 0 || body != count * layout.width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: llm.c header says %d tokens (%d bytes) but the file has %d bytes after the "
        "%d-byte header (truncated or corrupt)",
        EchoPath(file.path()), count, count * layout.width, body, kLlmcHeaderBytes));
  }
  layout.count = count;
  return layout;
}

absl::StatusOr<Layout> RawLayout(const DataFileMapping& file, TokenDtype token_dtype) {
  Layout layout;
  switch (token_dtype) {
    case TokenDtype::kUint16:
      layout.width = 2;
      break;
    case TokenDtype::kUint32:
      layout.width = 4;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: data.token_dtype %d is not uint16 or uint32", EchoPath(file.path()), static_cast<int>(token_dtype)));
  }
  layout.kind = NameOf(token_dtype);
  const int64_t size = static_cast<int64_t>(file.size());
  if (size % layout.width != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes is not a multiple of the %d-byte %s token size (wrong token_dtype, "
        "or a truncated file)",
        EchoPath(file.path()), size, layout.width, layout.kind));
  }
  layout.count = size / layout.width;
  return layout;
}

class TokenFile final : public TokenSource {
 public:
  TokenFile(std::unique_ptr<DataFileMapping> file, Layout layout, int64_t vocab_size)
      : file_(std::move(file)), layout_(std::move(layout)), vocab_size_(vocab_size) {}

  int64_t size() const override { return layout_.count; }

  absl::Status Read(int64_t start, absl::Span<int32_t> out) const override {
    const int64_t count = static_cast<int64_t>(out.size());
    absl::Status range = CheckTokenRange(start, count, size(), file_->path());
    if (!range.ok()) return range;
    for (int64_t i = 0; i < count; ++i) {
      const uint32_t token = TokenAt(start + i);
      if (token >= static_cast<uint64_t>(vocab_size_)) return BadToken(start + i, token);
      out[i] = static_cast<int32_t>(token);
    }
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrFormat("tokens %s (%s tokens, %s)", file_->path(),
                           FormatTokenCount(layout_.count), layout_.kind);
  }

  // Checks every token against the vocabulary.
  absl::Status CheckAll() const {
    std::vector<int32_t> scratch(std::min<int64_t>(layout_.count, 1 << 16));
    for (int64_t start = 0; start < layout_.count;) {
      const int64_t n = std::min<int64_t>(layout_.count - start, scratch.size());
      absl::Status s = Read(start, absl::MakeSpan(scratch.data(), n));
      if (!s.ok()) return s;
      start += n;
    }
    return absl::OkStatus();
  }

 private:
  // Precondition: 0 <= index < size().
  uint32_t TokenAt(int64_t index) const {
    const uint8_t* p = file_->data() + layout_.header_bytes + index * layout_.width;
    if (layout_.width == 2) return uint32_t{p[0]} | uint32_t{p[1]} << 8;
    return static_cast<uint32_t>(ReadInt32LE(p));
  }

  absl::Status BadToken(int64_t index, uint32_t token) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: token %d (byte offset %d) is %d, not < vocab_size %d", EchoPath(file_->path()),
                        index, layout_.header_bytes + index * layout_.width, token, vocab_size_));
  }

  std::unique_ptr<DataFileMapping> file_;
  Layout layout_;
  int64_t vocab_size_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenSource>> OpenTokenFile(const std::string& path,
                                                           TokenDtype token_dtype,
                                                           int64_t vocab_size,
                                                           int64_t eager_check_bytes) {
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: vocab_size %d is not in [1, 2^31]", EchoPath(path), vocab_size));
  }
  absl::StatusOr<std::unique_ptr<DataFileMapping>> file = DataFileMapping::Open(path);
  if (!file.ok()) return file.status();
  if ((*file)->size() == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the token file is empty", EchoPath(path)));
  }
  absl::StatusOr<Layout> layout =
      HasLlmcMagic(**file) ? LlmcLayout(**file) : RawLayout(**file, token_dtype);
  if (!layout.ok()) return layout.status();
  if (layout->count == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the file holds no tokens", EchoPath(path)));
  }
  const bool eager = static_cast<int64_t>((*file)->size()) <= eager_check_bytes;
  auto source = std::make_unique<TokenFile>(*std::move(file), *std::move(layout), vocab_size);
  if (eager) {
    absl::Status s = source->CheckAll();
    if (!s.ok()) return s;
  }
  return std::unique_ptr<TokenSource>(std::move(source));
}

}  // namespace slidedp
