// HfCheckpoint: see hf_checkpoint.h.
#include "runtime/model/hf_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/io/stop_token.h"
#include "runtime/io/file_access.h"
#include "runtime/io/json_nesting.h"
#include "runtime/io/user_text.h"
#include "runtime/model/safetensors.h"

namespace slidedp {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr size_t kMaxIndexBytes = 64 << 20;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The safetensors files of a model folder and, when sharded, the index's tensor->file map.
struct WeightFiles {
  std::vector<std::string> files;               // names inside the folder
  std::map<std::string, std::string> weight_map;  // empty for a single file
  bool indexed = false;
};

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

absl::StatusOr<WeightFiles> ParseIndex(const std::string& path) {
  // Never blocks, regular files only, inside the read roots (runtime/io/file_access.h).
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxIndexBytes);
  if (!text.ok()) return text.status();
  const std::string shown = EchoPath(path);
  if (const int line = JsonNestingExceeded(*text, kMaxJsonNesting); line != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", shown, "':", line, ": JSON nested deeper than ", kMaxJsonNesting, " levels"));
  }
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", shown, "' is not a JSON object"));
  }
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", shown, "': 'weight_map' missing or not an object"));
  }
  WeightFiles w;
  w.indexed = true;
  std::set<std::string> files;
  for (const auto& [tensor, file] : wm->items()) {
    // Shards are plain names inside the model folder: no '/', no "..", nothing absolute.
    if (!file.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", shown, "': weight_map entry '", Echo(tensor), "' is not a file name"));
    }
    if (!IsPlainFileName(file.get<std::string>())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", shown, "': weight_map entry '", Echo(tensor), "' names '", Echo(file.get<std::string>()),
          "', not a file name in the model folder (no '/', no '..')"));
    }
    w.weight_map[tensor] = file.get<std::string>();
    files.insert(file.get<std::string>());
  }
  w.files.assign(files.begin(), files.end());
  return w;
}

absl::StatusOr<WeightFiles> FindWeightFiles(const std::string& dir) {
  const std::string index = dir + "/" + kIndexFile;
  if (fs::exists(index)) return ParseIndex(index);
  if (fs::exists(dir + "/" + kSingleFile)) {
    WeightFiles w;
    w.files = {kSingleFile};
    return w;
  }
  return absl::NotFoundError(
      absl::StrCat("model folder '", EchoPath(dir), "' has neither ", kSingleFile, " nor ", kIndexFile));
}

bool Ignored(const std::string& name, const ModelLayout& layout) {
  if (absl::EndsWith(name, "rotary_emb.inv_freq")) return true;
  return name == "lm_head.weight" && !layout.units.empty() && layout.units.back().uses_tied_embedding;
}

struct Found {
  const SafetensorsFile* file = nullptr;
  int unit = -1, param = -1;
};

// The tensor `t` of `file` can fill parameter `spec`.
absl::Status CheckTensor(const SafetensorsFile& file, const SafetensorsTensorInfo& t, const ParamSpec& spec) {
  if (t.shape != spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat("'", EchoPath(file.name()), "': tensor '", Echo(t.name), "' has shape ",
                                                   ShapeString(t.shape), ", the config expects ",
                                                   ShapeString(spec.shape)));
  }
  if (t.dtype != SafetensorsDtype::kF32 && t.dtype != SafetensorsDtype::kBF16 && t.dtype != SafetensorsDtype::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("'", EchoPath(file.name()), "': tensor '", Echo(t.name), "' has dtype ",
                                                   std::string(SafetensorsDtypeName(t.dtype)),
                                                   " (F32, BF16, F16 only)"));
  }
  return absl::OkStatus();
}

// Matches the tensors of every file against the layout; fills `found` by tensor name.
absl::Status MatchTensors(const WeightFiles& w, const std::vector<SafetensorsFile>& files,
                          const ModelLayout& layout, std::map<std::string, Found>& found) {
  std::map<std::string, std::pair<int, int>> expected;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int p = 0; p < static_cast<int>(layout.units[u].params.size()); ++p) {
      expected[layout.units[u].params[p].name] = {u, p};
    }
  }
  for (size_t f = 0; f < files.size(); ++f) {
    const SafetensorsFile& file = files[f];
    for (const SafetensorsTensorInfo& t : file.tensors()) {
      if (w.indexed) {
        auto it = w.weight_map.find(t.name);
        if (it == w.weight_map.end() || it->second != w.files[f]) {
          return absl::InvalidArgumentError(absl::StrCat("'", EchoPath(file.name()), "': tensor '", Echo(t.name),
                                                         "' is not mapped to this file by ", kIndexFile));
        }
      }
      if (Ignored(t.name, layout)) continue;
      auto e = expected.find(t.name);
      if (e == expected.end()) {
        return absl::InvalidArgumentError(absl::StrCat("'", EchoPath(file.name()), "': tensor '", Echo(t.name),
                                                       "' is not a parameter of the configured model"));
      }
      absl::Status s = CheckTensor(file, t, layout.units[e->second.first].params[e->second.second]);
      if (!s.ok()) return s;
      auto [it, inserted] = found.emplace(t.name, Found{&file, e->second.first, e->second.second});
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", Echo(t.name), "' is in both '", EchoPath(it->second.file->name()),
                                                       "' and '", EchoPath(file.name()), "'"));
      }
    }
  }
  for (const auto& [name, file] : w.weight_map) {
    if (Ignored(name, layout) || found.count(name)) continue;
    if (expected.count(name)) continue;  // reported below as missing, with its shape
    return absl::InvalidArgumentError(absl::StrCat(kIndexFile, " maps tensor '", Echo(name), "' to '", Echo(file),
                                                   "', which does not hold it"));
  }
  for (const auto& [name, up] : expected) {
    if (found.count(name)) continue;
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' (shape ",
                                            ShapeString(layout.units[up.first].params[up.second].shape),
                                            ") is missing from the weights"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadHfWeights(const std::string& model_dir, const ModelLayout& layout,
                           const std::function<float*(int unit, int param)>& dest, const StopToken* stop) {
  absl::StatusOr<WeightFiles> w = FindWeightFiles(model_dir);
  if (!w.ok()) return w.status();
  std::vector<SafetensorsFile> files;
  files.reserve(w->files.size());
  for (const std::string& name : w->files) {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(model_dir + "/" + name);
    if (!f.ok()) return f.status();
    files.push_back(*std::move(f));
  }
  std::map<std::string, Found> found;
  absl::Status s = MatchTensors(*w, files, layout, found);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("loading '", EchoPath(model_dir), "': ", s.message()));
  for (const auto& [name, f] : found) {
    if (absl::Status st = CheckStop(stop, absl::StrCat("loading '", model_dir, "'")); !st.ok()) return st;
    const ParamSpec& spec = layout.units[f.unit].params[f.param];
    float* dst = dest(f.unit, f.param);
    if (dst == nullptr) return absl::InvalidArgumentError(absl::StrCat("no destination buffer for '", name, "'"));
    s = f.file->ReadAsFloat(name, dst, spec.numel);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

struct Shard {
  std::vector<TensorToWrite> tensors;
  uint64_t bytes = 0;
};

absl::StatusOr<std::vector<Shard>> PlanShards(const ModelLayout& layout,
                                              const std::function<const float*(int, int)>& src,
                                              SafetensorsDtype dtype, uint64_t max_shard_bytes) {
  std::vector<Shard> shards(1);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int p = 0; p < static_cast<int>(layout.units[u].params.size()); ++p) {
      const ParamSpec& spec = layout.units[u].params[p];
      const float* data = src(u, p);
      if (data == nullptr && spec.numel > 0) {
        return absl::InvalidArgumentError(absl::StrCat("no source buffer for '", spec.name, "'"));
      }
      const uint64_t bytes = static_cast<uint64_t>(spec.numel) * SafetensorsDtypeSize(dtype);
      if (!shards.back().tensors.empty() && shards.back().bytes + bytes > max_shard_bytes) shards.emplace_back();
      shards.back().tensors.push_back({spec.name, dtype, spec.shape, data});
      shards.back().bytes += bytes;
    }
  }
  return shards;
}

// Removes file `name` of folder `dir` if it is there, through a descriptor of the folder
// checked against the write roots.
absl::Status RemoveIfExists(const std::string& dir, const char* name) {
  absl::StatusOr<UniqueFd> d = OpenDirForWrite(dir);
  if (!d.ok()) return d.status();
  if (::unlinkat(d->get(), name, 0) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove stale '", EchoPath(dir), "/", name,
                                            "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteShards(const std::string& dir, const std::vector<Shard>& shards) {
  const std::map<std::string, std::string> meta = {{"format", "pt"}};  // transformers requires it
  if (shards.size() == 1) {
    absl::Status s = WriteSafetensors(dir + "/" + kSingleFile, shards[0].tensors, meta);
    return s.ok() ? RemoveIfExists(dir, kIndexFile) : s;
  }
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    absl::Status s = WriteSafetensors(dir + "/" + name, shards[i].tensors, meta);
    if (!s.ok()) return s;
    for (const TensorToWrite& t : shards[i].tensors) index["weight_map"][t.name] = name;
    total += shards[i].bytes;
  }
  index["metadata"]["total_size"] = total;
  absl::Status s = WriteFileAtomically(dir + "/" + kIndexFile, index.dump(2) + "\n");
  return s.ok() ? RemoveIfExists(dir, kSingleFile) : s;
}

}  // namespace

absl::Status SaveHfModel(const std::string& dir, const ModelConfig& config, const ModelLayout& layout,
                         const std::function<const float*(int unit, int param)>& src,
                         const std::string& dtype, int64_t max_shard_bytes) {
  if (dtype != "F32" && dtype != "BF16") {
    return absl::InvalidArgumentError(absl::StrCat("export dtype '", Echo(dtype), "' is not F32 or BF16"));
  }
  if (max_shard_bytes <= 0) return absl::InvalidArgumentError("max_shard_bytes must be positive");
  if (BuildLayout(config).total_numel != layout.total_numel) {
    return absl::InvalidArgumentError("SaveHfModel: the layout does not match the config");
  }
  // Created below a folder inside the write roots, never through a symlink; every file
  // is then written through a checked descriptor of the folder (AtomicFile).
  if (absl::StatusOr<UniqueFd> d = CreateDirForWrite(dir); !d.ok()) return d.status();
  const SafetensorsDtype st = dtype == "F32" ? SafetensorsDtype::kF32 : SafetensorsDtype::kBF16;
  absl::StatusOr<std::vector<Shard>> shards = PlanShards(layout, src, st, static_cast<uint64_t>(max_shard_bytes));
  if (!shards.ok()) return shards.status();
  absl::Status s = WriteFileAtomically(dir + "/config.json", ModelConfigToJson(config));
  if (!s.ok()) return s;
  return WriteShards(dir, *shards);
}

absl::StatusOr<std::vector<std::string>> CopyHfSideFiles(const std::string& model_dir, const std::string& tokenizer,
                                                         const std::string& dir) {
  constexpr size_t kMaxSideFileBytes = size_t{256} << 20;  // the largest tokenizer.json are ~20 MB
  std::vector<std::pair<std::string, std::string>> copies;  // (source, name in dir)
  if (!tokenizer.empty()) {
    std::error_code ec;
    const bool is_dir = fs::is_directory(tokenizer, ec);
    const fs::path file = is_dir ? fs::path(tokenizer) / "tokenizer.json" : fs::path(tokenizer);
    copies.emplace_back(file.string(), "tokenizer.json");
    if (file.filename() == "tokenizer.json") {
      for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"}) {
        copies.emplace_back((file.parent_path() / name).string(), name);
      }
    }
  }
  if (!model_dir.empty()) copies.emplace_back((fs::path(model_dir) / "generation_config.json").string(), "generation_config.json");
  std::vector<std::string> written;
  for (const auto& [source, name] : copies) {
    absl::StatusOr<std::string> text = ReadRegularFile(source, kMaxSideFileBytes);
    if (absl::IsNotFound(text.status())) continue;
    if (!text.ok()) {
      return absl::Status(text.status().code(), absl::StrCat("copying ", name, " into the export: ", text.status().message()));
    }
    if (absl::Status s = WriteFileAtomically(dir + "/" + name, *text); !s.ok()) return s;
    written.push_back(name);
  }
  return written;
}

}  // namespace slidedp
