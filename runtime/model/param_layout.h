// ParamLayout: how a model's parameters are grouped into streaming units (embedding,
// one per decoder block, final norm + LM head) and laid out as one flat buffer per unit.
// The layout is independent of devices and routes; every buffer of the host state,
// every GPU slot and every gradient buffer uses these offsets. Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"

namespace slidedp {

enum class UnitKind { kEmbedding, kBlock, kHead };

struct ParamSpec {
  std::string name;            // Hugging Face tensor name, e.g. "model.layers.3.mlp.up_proj.weight"
  std::vector<int64_t> shape;  // row-major
  int64_t offset = 0;          // in elements, within the unit's flat buffer
  int64_t numel = 0;
  bool decay = true;           // AdamW weight decay applies (false for norms and biases)
};

struct UnitLayout {
  UnitKind kind = UnitKind::kBlock;
  int layer = -1;  // decoder block index, -1 for embedding and head
  std::vector<ParamSpec> params;
  int64_t numel = 0;
  // Head with tied embeddings: the LM head weight is the embedding unit's table.
  bool uses_tied_embedding = false;

  // Index into params by name suffix after the unit prefix, or -1.
  int Find(const std::string& name) const;
};

struct ModelLayout {
  std::vector<UnitLayout> units;  // [embedding, block 0..L-1, head]
  int64_t total_numel = 0;

  int num_units() const { return static_cast<int>(units.size()); }
};

ModelLayout BuildLayout(const ModelConfig& config);

// Unit `unit`'s one name, of a layout of `num_units` units ([embedding, block 0..L-1,
// head]): "embedding", "block 3", "head". Traces, the step model's critical path, the
// plan, checkpoints and messages all name units with it.
std::string UnitName(int unit, int num_units);

}  // namespace slidedp
