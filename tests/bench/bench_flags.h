// Flags of the benchmark programs: "--name=value" from argv, or a default, and the job
// fields they share. No state.
#pragma once

#include <cstdio>
#include <cstdlib>
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

// An enumeration of the job (train_config_enums.h) by name, as in job files; an unknown
// name ends the program, naming the flag and the names it takes.
template <typename E>
E EnumFlag(int argc, char** argv, const std::string& name, const std::string& def) {
  const std::string value = Flag(argc, argv, name, def);
  const std::optional<E> e = EnumFromName<E>(value);
  if (!e) {
    std::fprintf(stderr, "--%s: '%s' is not one of %s\n", name.c_str(), value.c_str(), EnumNameList<E>().c_str());
    std::exit(2);
  }
  return *e;
}

// The job fields every benchmark takes: --model (qwen2.5-3b), --device (cuda),
// --workers (1), --seq_len (4096), --state_dtype (fp32: optimizer.state_dtype); a small
// learning rate.
inline TrainConfig BenchConfig(int argc, char** argv) {
  TrainConfig c;
  c.model = Flag(argc, argv, "model", "qwen2.5-3b");
  c.device = EnumFlag<DeviceKind>(argc, argv, "device", "cuda");
  c.workers = std::stoi(Flag(argc, argv, "workers", "1"));
  c.seq_len = std::stoll(Flag(argc, argv, "seq_len", "4096"));
  c.optimizer.lr = 1e-5;
  c.optimizer.state_dtype =
      EnumFromName<MomentDtype>(Flag(argc, argv, "state_dtype", "fp32")).value_or(MomentDtype::kFp32);
  return c;
}

}  // namespace slidedp
