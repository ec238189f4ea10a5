// Small helpers the runtime tests share: a per-process temporary folder and the tiny
// Llama shape that file tests load. Header-only; called from the test's thread.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "runtime/model/model_config.h"

namespace slidedp::testing {

// A fresh folder "<tmp>/<prefix>_<pid>_<name>", emptied now and removed when the test
// process ends.
inline std::string ProcessTempDir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  static struct Dirs {
    std::vector<std::string> all;
    ~Dirs() {
      std::error_code ec;
      for (const std::string& d : all) fs::remove_all(d, ec);
    }
  } dirs;
  const std::string dir =
      (fs::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()) + "_" + name)).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  dirs.all.push_back(dir);
  return dir;
}

// A one-layer Llama of 16 hidden units, 4 heads (2 KV heads of 4), vocabulary 32.
inline ModelConfig TinyLlamaConfig() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 1;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  return c;
}

}  // namespace slidedp::testing
