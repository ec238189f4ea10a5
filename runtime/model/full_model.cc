// FullModelLogits: see full_model.h.
#include "runtime/model/full_model.h"

#include "runtime/model/transformer.h"

namespace slidedp {

at::Tensor FullModelLogits(const ModelConfig& c, const ModelLayout& layout,
                           const std::vector<at::Tensor>& flats, const at::Tensor& ids,
                           const at::Tensor& positions) {
  const int head = layout.num_units() - 1;
  const at::Device device = flats[0].device();
  const at::Tensor table = ParamView(layout.units[0], flats[0], 0);
  RopeTables rope = MakeRope(c, ids.size(1), device);
  const TokenLayout tokens =
      positions.defined() ? DocumentLayout(c, positions, positions.to(device), &rope) : TokenLayout{rope, {}};
  at::Tensor x = EmbeddingForward(table, ids);
  for (int u = 1; u < head; ++u) x = BlockForward(c, ViewBlock(layout.units[u], flats[u]), x, tokens);
  const HeadParams p = ViewHead(layout, flats[head], flats[0]);
  return HeadLogits(c, p.norm, p.lm_head, x);
}

}  // namespace slidedp
