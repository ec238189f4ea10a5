// StepSchedule: the order in which one worker's step streams the model's units through
// its ring of parameter slots, as data. The engine's worker executes it
// (runtime/engine/worker.cc: which unit each fetch brings, into which slot, when the
// next fetch is issued) and the step model replays the same object (step_replay.cc), so
// that the model follows the engine when the step changes. Also the units by role
// (embedding, block i, head) and their one name (UnitName, runtime/model/param_layout.h).
// Plain data, no LibTorch; built once per worker or replay, read from any thread.
//
// A step's items, in the order the compute stream takes them:
//   forward   embedding, block 0 .. block L-1          (items 0 .. L)
//   head      head, and with a tied head the embedding's table too (one compute pass)
//   backward  block L-1 .. block 0                     (the embedding's backward
//                                                       needs no parameters)
// Item i is fetched into slot i % num_slots(). The first prefetch_depth() fetches are
// issued when the step starts; item i, when the compute stream takes it (head and
// backward) or once its compute is issued (forward: the next fetch may wait for the
// previous step's CPU update of its unit, and the compute should be queued first),
// issues the fetch of item i + prefetch_depth(). A fetch into a slot waits until the
// compute stream has released the slot's previous item (item i - num_slots(), or the
// previous step's last in that slot); num_slots() = depth + 2 (one computing, `depth`
// in flight, one more for the tied head, which holds the head and the table at once).
#pragma once

#include <string>
#include <vector>

namespace slidedp {

class StepSchedule {
 public:
  enum class Use { kForward, kHead, kBackward };

  struct Item {
    int unit = 0;
    int slot = 0;
    Use use = Use::kForward;
    // The item whose fetch this one issues (i + depth), or -1 past the step's end.
    int prefetch = -1;
    // True: the fetch is issued after this item's compute (forward); false: as soon
    // as the compute stream takes the item (head, backward).
    bool prefetch_after_release = false;
  };

  // `num_units` >= 2 ([embedding, block 0..L-1, head]); `prefetch_depth` as in the
  // policy (values below 1 mean 1).
  StepSchedule(int num_units, bool tied_head, int prefetch_depth);

  // Parameter slots of the ring for `prefetch_depth` (the worker allocates them, the
  // admission and the memory estimate count them).
  static int SlotsFor(int prefetch_depth);

  // ---- units by role ----
  int num_units() const { return num_units_; }
  int num_blocks() const { return num_units_ - 2; }
  static constexpr int embedding_unit() { return 0; }
  int block_unit(int block) const { return 1 + block; }
  int head_unit() const { return num_units_ - 1; }
  bool tied_head() const { return tied_head_; }
  // The unit's one name: "embedding", "block 3", "head".
  std::string unit_name(int unit) const;

  // ---- fetches and slots ----
  int prefetch_depth() const { return depth_; }
  int num_slots() const { return SlotsFor(depth_); }
  const std::vector<Item>& items() const { return items_; }
  const Item& item(int i) const { return items_[i]; }
  int size() const { return static_cast<int>(items_.size()); }
  // Item of unit `unit`'s forward (embedding or block), of the head, of the tied table
  // (-1 when the head is not tied), of block unit `unit`'s backward.
  int forward_item(int unit) const { return unit; }
  int head_item() const { return head_unit(); }
  int table_item() const { return tied_head_ ? head_unit() + 1 : -1; }
  int backward_item(int unit) const { return head_unit() + (tied_head_ ? 2 : 1) + (head_unit() - 1 - unit); }
  // Items [0, forward_end()) are the forward-only pass (evaluation): forward and head.
  int forward_end() const { return head_unit() + (tied_head_ ? 2 : 1); }

  // The order in which a pass over items [0, end) fetches, takes and releases them
  // (the head's items are released together after its compute). What the worker does
  // and the replay visits, for checking them against each other.
  enum class Op { kFetch, kAcquire, kRelease };
  struct Event {
    Op op;
    int item;
    bool operator==(const Event& o) const { return op == o.op && item == o.item; }
  };
  std::vector<Event> Events(int end) const;

 private:
  int num_units_;
  bool tied_head_;
  int depth_;
  std::vector<Item> items_;
};

// "fetch 3", "acquire 4", "release 0": for test messages.
std::string ToString(const StepSchedule::Event& e);

}  // namespace slidedp
