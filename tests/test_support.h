// Small helpers the runtime tests share: a per-process temporary folder, the tiny Llama
// shape that file tests load, and the tiny trainer job that the trainer tests start
// from. Header-only; called from the test's thread.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/train_config.h"

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

// The tiny preset trained on the built-in synthetic corpus by two workers, 2 sequences of
// 32 tokens a micro-batch, one micro-batch a step, at lr 3e-3 (where it learns within a
// few steps), for `steps` steps. The trainer tests start from it and change what they
// are about.
inline TrainConfig TinyTrainConfig(int64_t steps) {
  TrainConfig c;
  c.model = "tiny";
  c.data.format = DataFormat::kSynthetic;
  c.seq_len = 32;
  c.micro_batch_size = 2;
  c.grad_accum = 1;
  c.workers = 2;
  c.steps = steps;
  c.optimizer.lr = 3e-3;
  return c;
}

}  // namespace slidedp::testing
