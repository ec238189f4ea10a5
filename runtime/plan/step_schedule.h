// StepSchedule: the order in which one worker's step streams the model's units through
// its parameter slots, as data. The engine's worker executes it (runtime/engine/
// worker.cc: which unit each fetch brings, into which slot, when the next fetch is
// issued) and the step model replays the same object (step_replay.cc), so that the
// model follows the engine when the step changes. Also the units by role (embedding,
// block i, head) and their one name (UnitName, runtime/model/param_layout.h).
// Plain data, no LibTorch; built once per worker or replay, read from any thread.
//
// A step's items, in the order the compute stream takes them, with K kept blocks
// (policy.kept_blocks: the last K decoder blocks, units F = head - K .. head - 1):
//   forward   embedding, blocks before F                (layer-major over micro-batches)
//   kept      the kept blocks, F .. head - 1            (fetched once)
//   head      head, and with a tied head the embedding's table too
//   backward  the blocks before F, last first           (the embedding's backward
//                                                       needs no parameters)
// The kept blocks and the head run micro-batch-major: micro-batch 0 takes each kept
// item as it reaches it, then the head's items; every micro-batch goes forward through
// the kept blocks (keeping its graph), through the loss and back, so that one
// micro-batch's graphs are alive at a time and no kept block is fetched twice. The head's
// items are released after the last micro-batch's loss, each kept item after the last
// micro-batch's backward through it (last block first). The forward-only pass
// (evaluation) takes and releases kept items as forward items.
//
// Item i issues the fetch of item i + prefetch_depth(): a forward item once its compute
// is issued and its slot released (the next fetch may wait for the previous step's CPU
// update of its unit, and the compute should be queued first), a kept item once the
// compute of its first micro-batch is issued, a head or backward item as soon as the
// compute stream takes it. The first prefetch_depth() fetches are issued when the pass
// starts. Slots: the non-kept items go round a ring of ring_slots() = depth + 2 slots
// (one computing, `depth` in flight, one more for the tied head, which holds the head and
// the table at once), the n-th of them into slot n % ring_slots(), and a fetch into a
// slot waits until the compute stream released its previous item; each kept block has
// a slot of its own after the ring's (num_slots() = ring_slots() + K; the worker leaves
// it unallocated where the block is resident on its GPU and reads the resident copy).
#pragma once

#include <string>
#include <vector>

namespace slidedp {

class StepSchedule {
 public:
  enum class Use { kForward, kKept, kHead, kBackward };
  // When an item issues its prefetch (above).
  enum class PrefetchAt { kAcquire, kFirstCompute, kRelease };

  struct Item {
    int unit = 0;
    int slot = 0;
    Use use = Use::kForward;
    // The item whose fetch this one issues (i + depth), or -1 past the step's end.
    int prefetch = -1;
    PrefetchAt prefetch_at = PrefetchAt::kAcquire;
  };

  // `num_units` >= 2 ([embedding, block 0..L-1, head]); `prefetch_depth` as in the
  // policy (values below 1 mean 1); `kept_blocks` the last blocks that keep their graph
  // (clamped to [0, L]).
  StepSchedule(int num_units, bool tied_head, int prefetch_depth, int kept_blocks = 0);

  // Ring slots for `prefetch_depth` (the worker allocates them with the size of the
  // largest unit; the admission and the memory estimate count them; kept blocks' slots
  // are counted with the kept blocks).
  static int SlotsFor(int prefetch_depth);

  // ---- units by role ----
  int num_units() const { return num_units_; }
  int num_blocks() const { return num_units_ - 2; }
  static constexpr int embedding_unit() { return 0; }
  int block_unit(int block) const { return 1 + block; }
  int head_unit() const { return num_units_ - 1; }
  bool tied_head() const { return tied_head_; }
  // The kept blocks: units [first_kept_unit(), head_unit()).
  int kept_blocks() const { return kept_; }
  int first_kept_unit() const { return head_unit() - kept_; }
  bool kept(int unit) const { return unit >= first_kept_unit() && unit < head_unit(); }
  // The unit's one name: "embedding", "block 3", "head".
  std::string unit_name(int unit) const;

  // ---- fetches and slots ----
  int prefetch_depth() const { return depth_; }
  int ring_slots() const { return SlotsFor(depth_); }
  int num_slots() const { return ring_slots() + kept_; }
  const std::vector<Item>& items() const { return items_; }
  const Item& item(int i) const { return items_[i]; }
  int size() const { return static_cast<int>(items_.size()); }
  // Item of unit `unit`'s forward (embedding or block, kept or not), of the head, of the
  // tied table (-1 when the head is not tied), of non-kept block unit `unit`'s backward.
  int forward_item(int unit) const { return unit; }
  int head_item() const { return head_unit(); }
  int table_item() const { return tied_head_ ? head_unit() + 1 : -1; }
  int backward_item(int unit) const { return forward_end() + (first_kept_unit() - 1 - unit); }
  // Items [0, forward_end()) are the forward-only pass (evaluation): forward, kept, head.
  int forward_end() const { return head_unit() + (tied_head_ ? 2 : 1); }

  // The order in which a pass fetches, takes and releases items: the step (every item)
  // or the forward-only pass (items [0, forward_end())). What the worker does and the
  // replay visits, for checking them against each other.
  enum class Pass { kStep, kEval };
  enum class Op { kFetch, kAcquire, kRelease };
  struct Event {
    Op op;
    int item;
    bool operator==(const Event& o) const { return op == o.op && item == o.item; }
  };
  std::vector<Event> Events(Pass pass) const;
  // The end of a pass's items.
  int end(Pass pass) const { return pass == Pass::kStep ? size() : forward_end(); }

 private:
  int num_units_;
  bool tied_head_;
  int depth_;
  int kept_;
  std::vector<Item> items_;
};

// "fetch 3", "acquire 4", "release 0": for test messages.
std::string ToString(const StepSchedule::Event& e);

}  // namespace slidedp
