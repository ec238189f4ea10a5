// StepSchedule: see step_schedule.h.
#include "runtime/plan/step_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/model/param_layout.h"

namespace slidedp {

StepSchedule::StepSchedule(int num_units, bool tied_head, int prefetch_depth)
    : num_units_(num_units), tied_head_(tied_head), depth_(std::max(1, prefetch_depth)) {
  const int head = head_unit();
  auto add = [&](int unit, Use use) {
    Item it;
    it.unit = unit;
    it.use = use;
    it.prefetch_after_release = use == Use::kForward;
    items_.push_back(it);
  };
  for (int u = 0; u < head; ++u) add(u, Use::kForward);
  add(head, Use::kHead);
  if (tied_head) add(embedding_unit(), Use::kHead);
  for (int u = head - 1; u >= 1; --u) add(u, Use::kBackward);
  const int n = size(), S = num_slots();
  for (int i = 0; i < n; ++i) {
    items_[i].slot = i % S;
    items_[i].prefetch = i + depth_ < n ? i + depth_ : -1;
  }
}

int StepSchedule::SlotsFor(int prefetch_depth) { return std::max(1, prefetch_depth) + 2; }

std::string StepSchedule::unit_name(int unit) const { return UnitName(unit, num_units_); }

std::vector<StepSchedule::Event> StepSchedule::Events(int end) const {
  std::vector<Event> out;
  auto fetch = [&](int i) {
    if (i >= 0 && i < end) out.push_back({Op::kFetch, i});
  };
  for (int i = 0; i < depth_; ++i) fetch(i);
  std::vector<int> held;  // the head's items, released together
  for (int i = 0; i < end; ++i) {
    const Item& it = items_[i];
    out.push_back({Op::kAcquire, i});
    if (!it.prefetch_after_release) fetch(it.prefetch);
    if (it.use == Use::kHead) {
      held.push_back(i);
      if (i + 1 < end && items_[i + 1].use == Use::kHead) continue;
      for (int h : held) out.push_back({Op::kRelease, h});
      held.clear();
      continue;
    }
    out.push_back({Op::kRelease, i});
    if (it.prefetch_after_release) fetch(it.prefetch);
  }
  return out;
}

std::string ToString(const StepSchedule::Event& e) {
  const char* op = e.op == StepSchedule::Op::kFetch ? "fetch " : e.op == StepSchedule::Op::kAcquire ? "acquire " : "release ";
  return absl::StrCat(op, e.item);
}

}  // namespace slidedp
