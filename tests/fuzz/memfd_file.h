// A fuzz input as a file path, for readers that open files (token files, checkpoints):
// one memfd per process, rewritten per input and opened as /proc/self/fd/N. Used from
// the fuzzer's one thread.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace slidedp::fuzz {

inline std::string InputAsFile(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("slidedp_fuzz", 0);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) __builtin_trap();
  for (size_t done = 0; done < size;) {
    const ssize_t w = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (w <= 0) __builtin_trap();
    done += static_cast<size_t>(w);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace slidedp::fuzz
