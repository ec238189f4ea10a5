// export_fixtures: loads the Hugging Face fixtures with our reader and writes them back
// with our writer (F32 in one file, BF16 in small shards), so that
// tests/reference/check_hf_export.py can check that transformers and the safetensors
// package read what we write. Run on a machine with transformers (the GPU host).
#include <iostream>
#include <random>
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/safetensors.h"
using namespace slidedp;
int main(int argc, char** argv) {
  if (argc != 3) { std::cerr << "usage: export_fixtures FIXTURES_DIR OUT_DIR\n"; return 2; }
  const std::string fixtures = argv[1], out = argv[2];
  for (std::string fam : {"llama", "qwen2", "qwen3"}) {
    std::string src = fixtures + "/" + fam;
    ModelConfig c = *LoadModelConfig(src);
    ModelLayout L = BuildLayout(c);
    std::vector<std::vector<std::vector<float>>> w(L.num_units());
    for (int u = 0; u < L.num_units(); ++u) for (auto& p : L.units[u].params) w[u].emplace_back(p.numel);
    auto s = LoadHfWeights(src, L, [&](int u, int p) { return w[u][p].data(); });
    if (!s.ok()) { std::cerr << s << "\n"; return 1; }
    auto get = [&](int u, int p) -> const float* { return w[u][p].data(); };
    s = SaveHfModel(out + "/" + fam + "_f32", c, L, get, "F32", int64_t{1} << 30);
    if (s.ok()) s = SaveHfModel(out + "/" + fam + "_bf16", c, L, get, "BF16", 20000);
    if (!s.ok()) { std::cerr << s << "\n"; return 1; }
  }
  for (std::string name : PresetNames()) {
    if (name != "tiny" && name != "small") continue;
    ModelConfig c = *PresetConfig(name);
    ModelLayout L = BuildLayout(c);
    std::mt19937 rng(1); std::normal_distribution<float> d(0, 0.02f);
    std::vector<std::vector<std::vector<float>>> w(L.num_units());
    for (int u = 0; u < L.num_units(); ++u) for (auto& p : L.units[u].params) { w[u].emplace_back(p.numel); for (auto& x : w[u].back()) x = p.shape.size() == 1 ? 1.0f : d(rng); }
    auto s = SaveHfModel(out + "/" + name, c, L, [&](int u, int p) -> const float* { return w[u][p].data(); }, "BF16", int64_t{1} << 30);
    if (!s.ok()) { std::cerr << s << "\n"; return 1; }
  }
  // Configs only (no weights) of the real presets, to check transformers reads them.
  for (std::string name : PresetNames()) {
    std::string dir = out + "/cfg_" + name;
    std::system(("mkdir -p " + dir).c_str());
    auto s = WriteFileAtomically(dir + "/config.json", ModelConfigToJson(*PresetConfig(name)));
    if (!s.ok()) { std::cerr << s << "\n"; return 1; }
  }
  return 0;
}
