// libFuzzer entry point for the checkpoint reader: any bytes are read as a checkpoint
// of a two-unit model; a damaged file is an error (never a fault, never a huge
// allocation), and only an intact one reads OK. Built and run by deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/state/checkpoint.h"
#include "tests/fuzz/memfd_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = slidedp::fuzz::InputAsFile(data, size);
  (void)slidedp::ReadCheckpointMeta(path);
  std::vector<float> a(3 * 4), b(3 * 2);
  std::vector<slidedp::CheckpointUnit> units = {
      {"unit0", 4, &a[0], slidedp::Fp32Moments(&a[4], &a[8])},
      {"unit1", 2, &b[0], slidedp::Fp32Moments(&b[2], &b[4])}};
  (void)slidedp::ReadCheckpoint(path, units);
  return 0;
}
