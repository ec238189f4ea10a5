// StepSchedule: see step_schedule.h.
#include "runtime/plan/step_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/model/param_layout.h"

namespace slidedp {

StepSchedule::StepSchedule(int num_units, bool tied_head, int prefetch_depth, int kept_blocks)
    : num_units_(num_units),
      tied_head_(tied_head),
      depth_(std::max(1, prefetch_depth)),
      kept_(std::clamp(kept_blocks, 0, std::max(0, num_units - 2))) {
  const int head = head_unit(), first_kept = first_kept_unit();
  auto add = [&](int unit, Use use) {
    Item it;
    it.unit = unit;
    it.use = use;
    it.prefetch_at = use == Use::kForward ? PrefetchAt::kRelease
                     : use == Use::kKept  ? PrefetchAt::kFirstCompute
                                          : PrefetchAt::kAcquire;
    items_.push_back(it);
  };
  for (int u = 0; u < head; ++u) add(u, u < first_kept ? Use::kForward : Use::kKept);
  add(head, Use::kHead);
  if (tied_head) add(embedding_unit(), Use::kHead);
  for (int u = first_kept - 1; u >= 1; --u) add(u, Use::kBackward);
  const int n = size(), ring = ring_slots();
  int ring_position = 0;
  for (int i = 0; i < n; ++i) {
    Item& it = items_[i];
    it.slot = it.use == Use::kKept ? ring + (it.unit - first_kept) : ring_position++ % ring;
    it.prefetch = i + depth_ < n ? i + depth_ : -1;
  }
}

int StepSchedule::SlotsFor(int prefetch_depth) { return std::max(1, prefetch_depth) + 2; }

std::string StepSchedule::unit_name(int unit) const { return UnitName(unit, num_units_); }

std::vector<StepSchedule::Event> StepSchedule::Events(Pass pass) const {
  const int stop = end(pass);
  std::vector<Event> out;
  auto fetch = [&](int i) {
    if (i >= 0 && i < stop) out.push_back({Op::kFetch, i});
  };
  for (int i = 0; i < depth_; ++i) fetch(i);
  std::vector<int> held_kept;  // the step's kept items, released after the head's
  std::vector<int> held_head;  // the head's items, released together
  for (int i = 0; i < stop; ++i) {
    const Item& it = items_[i];
    out.push_back({Op::kAcquire, i});
    if (it.prefetch_at != PrefetchAt::kRelease) fetch(it.prefetch);
    if (it.use == Use::kKept && pass == Pass::kStep) {
      held_kept.push_back(i);
      continue;
    }
    if (it.use == Use::kHead) {
      held_head.push_back(i);
      if (i + 1 < stop && items_[i + 1].use == Use::kHead) continue;
      for (int h : held_head) out.push_back({Op::kRelease, h});
      held_head.clear();
      // The last micro-batch's backward through the kept blocks, last block first.
      for (auto k = held_kept.rbegin(); k != held_kept.rend(); ++k) out.push_back({Op::kRelease, *k});
      held_kept.clear();
      continue;
    }
    out.push_back({Op::kRelease, i});
    if (it.prefetch_at == PrefetchAt::kRelease) fetch(it.prefetch);
  }
  return out;
}

std::string ToString(const StepSchedule::Event& e) {
  const char* op = e.op == StepSchedule::Op::kFetch ? "fetch " : e.op == StepSchedule::Op::kAcquire ? "acquire " : "release ";
  return absl::StrCat(op, e.item);
}

}  // namespace slidedp
