// tokenize_bench: throughput of slidedp's C++ tokenizer (runtime/data/tokenizer) on a
// corpus of JSON lines {"text": ...}, the program behind the tokenization figures of
// tests/bench/RESULTS.md. tests/bench/tokenize_baseline.py runs the Hugging Face
// tokenizers package on the same file and prints the same checksum, so the two runs can be
// compared for speed and for equal ids.
// Usage: tokenize_bench --tokenizer=DIR_OR_JSON --corpus=FILE.jsonl [--threads=2] [--repeat=3]
// Prints: documents, MB of UTF-8 text, ids, an FNV-1a checksum of all ids in document
// order, and MB/s for the best of `repeat` timed passes (the corpus is read and parsed
// before timing; each thread keeps its own BpeCache, emptied before every pass).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/data/tokenizer/tokenizer.h"

namespace slidedp {
namespace {

std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
  }
  return def;
}

uint64_t Fnv1a(uint64_t h, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    const uint32_t u = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

int Main(int argc, char** argv) {
  const std::string tok_path = Flag(argc, argv, "tokenizer", "");
  const std::string corpus = Flag(argc, argv, "corpus", "");
  const int threads = std::max(1, std::stoi(Flag(argc, argv, "threads", "2")));
  const int repeat = std::max(1, std::stoi(Flag(argc, argv, "repeat", "3")));
  if (tok_path.empty() || corpus.empty()) {
    std::fprintf(stderr, "usage: tokenize_bench --tokenizer=DIR_OR_JSON --corpus=FILE.jsonl [--threads=2] [--repeat=3]\n");
    return 2;
  }
  auto tok = Tokenizer::Load(tok_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenize_bench: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> docs;
  size_t bytes = 0;
  {
    std::ifstream in(corpus);
    if (!in) {
      std::fprintf(stderr, "tokenize_bench: cannot open %s\n", corpus.c_str());
      return 1;
    }
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
        std::fprintf(stderr, "tokenize_bench: %s:%lld: not {\"text\": string}\n", corpus.c_str(),
                     static_cast<long long>(n));
        return 1;
      }
      docs.push_back(j["text"].get<std::string>());
      bytes += docs.back().size();
    }
  }
  std::vector<std::vector<int32_t>> ids(docs.size());
  double best = 1e30;
  for (int pass = 0; pass < repeat; ++pass) {
    for (auto& v : ids) v.clear();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        BpeCache cache;
        for (size_t d = t; d < docs.size(); d += threads) (*tok)->Encode(docs[d], false, &ids[d], &cache);
      });
    }
    for (std::thread& th : pool) th.join();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  uint64_t h = 1469598103934665603ull;
  size_t n_ids = 0;
  for (const auto& v : ids) {
    h = Fnv1a(h, v);
    n_ids += v.size();
  }
  std::printf("slidedp tokenizer: %zu documents, %.2f MB, %zu ids, checksum %016llx, threads %d, best of %d: %.3f s, %.2f MB/s\n",
              docs.size(), bytes / 1e6, n_ids, static_cast<unsigned long long>(h), threads, repeat, best,
              bytes / 1e6 / best);
  return 0;
}

}  // namespace
}  // namespace slidedp

int main(int argc, char** argv) { return slidedp::Main(argc, argv); }
