// UpdatePipeline over several hosts: every host meets the others in each unit's
// reduction in the same order, the backward's (the head first, the embedding last),
// whatever order this host's workers call GradLanded in. A resident unit lands from its
// owner's thread and a streamed one from the last rank to arrive, so on a host with
// several workers two units can land in either order; were the link to reduce them as
// they come, one host's reduction of one unit would meet another host's of another.
// Likewise the gathers of updated copies: without clipping a host updates each unit as
// it lands, or, in a plan's first step (held, which each host decides alone after its
// own re-plan), all at once after the last; both gather in the same order.
#include "runtime/engine/update_pipeline.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/engine/host_group.h"
#include "runtime/model/model_config.h"
#include "tests/test_support.h"

namespace slidedp {
namespace {

// One host of two whose exchanges only record which buffer each reduction summed.
class RecordingHosts : public HostGroup {
 public:
  int hosts() const override { return 2; }
  int rank() const override { return 0; }
  absl::Status ReduceScatter(const at::Tensor& in, at::Tensor) override {
    absl::MutexLock lock(&mu_);
    reduced_.push_back(in.data_ptr());
    return absl::OkStatus();
  }
  absl::Status AllGather(at::Tensor buf) override {
    absl::MutexLock lock(&mu_);
    gathered_.push_back(buf.data_ptr());
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(std::vector<double>&) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  int64_t bytes_sent() const override { return 0; }
  absl::StatusOr<std::unique_ptr<HostGroup>> Channel(const std::string&) override {
    return absl::UnimplementedError("not in this test");
  }
  std::vector<void*> reduced() {
    absl::MutexLock lock(&mu_);
    return reduced_;
  }
  std::vector<void*> gathered() {
    absl::MutexLock lock(&mu_);
    return gathered_;
  }

 private:
  absl::Mutex mu_;
  std::vector<void*> reduced_, gathered_;
};

// Host 0's state of the tiny model in a job over two hosts.
std::unique_ptr<HostState> HostZeroOfTwo() {
  auto state = std::make_unique<HostState>(*PresetConfig("tiny"), at::kFloat, /*chunk_elems=*/0, /*pin=*/false,
                                           /*fp32_grad=*/true, MomentDtype::kFp32, /*shard=*/0, /*shards=*/2);
  EXPECT_TRUE(state->InitRandom(1).ok());
  return state;
}

TEST(UpdatePipelineHosts, ReducesUnitsInTheBackwardsOrderWhateverOrderTheyLandIn) {
  const std::unique_ptr<HostState> owned = HostZeroOfTwo();
  HostState& state = *owned;
  const int U = state.num_units();
  ASSERT_GE(U, 4);
  TrainConfig config = testing::TinyTrainConfig(2);
  RecordingHosts link, gather;
  UpdatePipeline pipeline(&state, config);
  pipeline.set_hosts(&link, &gather);
  for (int64_t step = 0; step < 2; ++step) {
    pipeline.BeginStep(step, 1e-3);
    // The head, then block 1 before block 2 (two workers' threads racing), then the rest.
    std::vector<int> order = {U - 1, 1, 2};
    for (int u = U - 2; u >= 0; --u) {
      if (u != 1 && u != 2) order.push_back(u);
    }
    for (int u : order) pipeline.GradLanded(u, step, 0.0);
    const StepUpdateSummary s = pipeline.Summary(step);
    EXPECT_FALSE(s.skipped);
    pipeline.Drain();
    ASSERT_TRUE(pipeline.status().ok()) << pipeline.status();
  }
  const std::vector<void*> reduced = link.reduced();
  ASSERT_EQ(reduced.size(), static_cast<size_t>(2 * U));
  for (int i = 0; i < 2 * U; ++i) {
    const int u = U - 1 - i % U;
    EXPECT_EQ(reduced[i], state.unit(u).grad.data_ptr()) << "reduction " << i << " should be unit " << u;
  }
}

TEST(UpdatePipelineHosts, GathersInTheSameOrderWhetherAStepIsHeldOrNot) {
  const std::unique_ptr<HostState> owned = HostZeroOfTwo();
  HostState& state = *owned;
  const int U = state.num_units();
  TrainConfig config = testing::TinyTrainConfig(2);
  config.optimizer.max_grad_norm = 0;  // no clipping: updates as units land
  std::vector<std::vector<void*>> orders;
  for (bool hold : {false, true}) {
    RecordingHosts link, gather;
    UpdatePipeline pipeline(&state, config);
    pipeline.set_hosts(&link, &gather);
    pipeline.BeginStep(0, 1e-3, hold);
    for (int u = U - 1; u >= 0; --u) pipeline.GradLanded(u, 0, 0.0);
    pipeline.Summary(0);
    pipeline.Drain();
    ASSERT_TRUE(pipeline.status().ok()) << pipeline.status();
    orders.push_back(gather.gathered());
  }
  ASSERT_EQ(orders[0].size(), static_cast<size_t>(U));
  EXPECT_EQ(orders[1], orders[0]) << "a held step gathers in another order than one that is not";
  for (int i = 0; i < U; ++i) EXPECT_EQ(orders[0][i], state.unit(U - 1 - i).params.data_ptr()) << i;
}

}  // namespace
}  // namespace slidedp
