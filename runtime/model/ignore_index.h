// kIgnoreIndex: the target token id that takes no loss. The model's loss skips it
// (transformer.h's CrossEntropySum, fused_ops.h); the data writes it where a sequence has
// no next token to learn (runtime/data/dataset.h's TokenBatch). A constant; any thread.
#pragma once

#include <cstdint>

namespace slidedp {

inline constexpr int32_t kIgnoreIndex = -100;

}  // namespace slidedp
