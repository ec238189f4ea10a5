// libFuzzer entry point for the safetensors reader: any byte string is parsed as a file
// image; whatever opens must give in-range byte spans and convert without faults.
// Built and run (ASan + UBSan, bounded time) by deploy/fuzz.sh; by hand, from the repository root:
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     tests/fuzz/safetensors_fuzz.cc runtime/model/safetensors.cc \
//     $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format) -o /tmp/safetensors_fuzz
//   /tmp/safetensors_fuzz -max_total_time=60 -max_len=4096 /tmp/st_corpus tests/fuzz/corpus/safetensors
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<slidedp::SafetensorsFile> f =
      slidedp::SafetensorsFile::FromBuffer("fuzz", std::string(reinterpret_cast<const char*>(data), size));
  if (!f.ok()) return 0;
  static volatile uint64_t sink = 0;  // keeps the reads of every byte
  uint64_t sum = 0;
  for (const slidedp::SafetensorsTensorInfo& t : f->tensors()) {
    absl::StatusOr<absl::Span<const uint8_t>> raw = f->RawBytes(t.name);
    if (!raw.ok()) __builtin_trap();  // every listed tensor must be readable
    for (uint8_t b : *raw) sum += b;
    if (t.numel > (int64_t{1} << 20)) continue;
    std::vector<float> out(static_cast<size_t>(t.numel));
    absl::Status s = f->ReadAsFloat(t.name, out.data(), t.numel);
    (void)s;  // refused for non-float dtypes, which is fine
  }
  sink = sink + sum;
  return 0;
}
