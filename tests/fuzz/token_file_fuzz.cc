// libFuzzer entry point for the token file reader (raw uint16/uint32 and llm.c
// headers): any bytes are opened as a token file; whatever opens must report a size > 0
// and read every range inside it with OK or a vocabulary error, never a fault.
// Built and run by deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/data/token_file.h"
#include "tests/fuzz/memfd_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const slidedp::TokenDtype dtype = (data[0] & 1) ? slidedp::TokenDtype::kUint32 : slidedp::TokenDtype::kUint16;
  const int64_t vocab = (data[0] & 2) ? 50000 : 300;
  const int64_t eager = (data[0] & 4) ? 0 : int64_t{1} << 20;  // lazy or eager range check
  const std::string path = slidedp::fuzz::InputAsFile(data + 1, size - 1);
  absl::StatusOr<std::unique_ptr<slidedp::TokenSource>> src =
      slidedp::OpenTokenFile(path, dtype, vocab, eager);
  if (!src.ok()) return 0;
  const int64_t n = (*src)->size();
  if (n <= 0) __builtin_trap();
  std::vector<int32_t> out(static_cast<size_t>(std::min<int64_t>(n, 4096)));
  for (int64_t start : {int64_t{0}, n - static_cast<int64_t>(out.size())}) {
    absl::Status s = (*src)->Read(start, absl::MakeSpan(out));
    if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    if (s.ok()) {
      for (int32_t t : out) {
        if (t < 0 || t >= vocab) __builtin_trap();  // an OK read is in the vocabulary
      }
    }
  }
  if ((*src)->Read(n, absl::MakeSpan(out.data(), 1)).ok()) __builtin_trap();  // past the end
  return 0;
}
