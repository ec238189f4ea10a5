// Flags of the benchmark programs: "--name=value" from argv, or a default, and the job
// fields they share. No state.
#pragma once

#include <string>

#include "runtime/train_config.h"

namespace slidedp {

inline std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
  }
  return def;
}

// The job fields every benchmark takes: --model (qwen2.5-3b), --device (cuda),
// --workers (1), --seq_len (4096), --state_dtype (fp32: optimizer.state_dtype); a small
// learning rate.
inline TrainConfig BenchConfig(int argc, char** argv) {
  TrainConfig c;
  c.model = Flag(argc, argv, "model", "qwen2.5-3b");
  c.device = Flag(argc, argv, "device", "cuda");
  c.workers = std::stoi(Flag(argc, argv, "workers", "1"));
  c.seq_len = std::stoll(Flag(argc, argv, "seq_len", "4096"));
  c.optimizer.lr = 1e-5;
  c.optimizer.state_dtype = Flag(argc, argv, "state_dtype", "fp32");
  return c;
}

}  // namespace slidedp
