// Flags of the benchmark programs: "--name=value" from argv, or a default. No state.
#pragma once

#include <string>

namespace slidedp {

inline std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
  }
  return def;
}

}  // namespace slidedp
