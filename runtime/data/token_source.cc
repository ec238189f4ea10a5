// TokenSource helpers and the in-memory source: see token_source.h.
#include "runtime/data/token_source.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace slidedp {

absl::Status CheckTokenRange(int64_t start, int64_t count, int64_t size, const std::string& what) {
  if (start < 0 || count < 0 || start > size || count > size - start) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s: read of tokens [%d, %d) is outside the stream of %d tokens", what,
                        start, start + count, size));
  }
  return absl::OkStatus();
}

absl::Status InMemoryTokenSource::Read(int64_t start, absl::Span<int32_t> out) const {
  const int64_t count = static_cast<int64_t>(out.size());
  absl::Status range = CheckTokenRange(start, count, size(), description_);
  if (!range.ok()) return range;
  std::copy_n(tokens_.begin() + start, count, out.begin());
  return absl::OkStatus();
}

absl::Status TokenSource::ReadFlags(int64_t start, absl::Span<uint8_t> out) const {
  absl::Status range = CheckTokenRange(start, static_cast<int64_t>(out.size()), size(), Describe());
  if (!range.ok()) return range;
  std::fill(out.begin(), out.end(), uint8_t{kTokenLoss});
  return absl::OkStatus();
}

absl::Status InMemoryTokenSource::ReadFlags(int64_t start, absl::Span<uint8_t> out) const {
  if (flags_.empty()) return TokenSource::ReadFlags(start, out);
  const int64_t count = static_cast<int64_t>(out.size());
  absl::Status range = CheckTokenRange(start, count, size(), description_);
  if (!range.ok()) return range;
  std::copy_n(flags_.begin() + start, count, out.begin());
  return absl::OkStatus();
}

std::string FormatTokenCount(int64_t n) {
  if (n < 1000) return absl::StrFormat("%d", n);
  if (n < 1000000) return absl::StrFormat("%.1fK", n / 1e3);
  if (n < 1000000000) return absl::StrFormat("%.1fM", n / 1e6);
  return absl::StrFormat("%.1fG", n / 1e9);
}

}  // namespace slidedp
