// libFuzzer entry point for the daemon's spec translation (server/spec_translation.h):
// a slidedp.v1.JobSpec parsed from the input (binary protobuf), translated to a
// TrainConfig with and without the path checks (roots in a temporary directory) and
// back. Never crashes; the unchecked translation round-trips (JobSpec -> TrainConfig ->
// JobSpec -> TrainConfig gives the same config); an accepted spec has only UTF-8 paths.
// Built and run by deploy/fuzz.sh.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "runtime/io/user_text.h"
#include "runtime/train_config.h"
#include "server/path_policy.h"
#include "server/spec_translation.h"

namespace {

const slidedp::server::PathPolicy* Policy() {
  static const slidedp::server::PathPolicy* policy = [] {
    char dir[] = "/tmp/slidedp-spec-fuzz-XXXXXX";
    if (mkdtemp(dir) == nullptr) __builtin_trap();
    const std::string root(dir);
    for (const char* sub : {"/models", "/data", "/out"}) std::filesystem::create_directories(root + sub);
    slidedp::server::PathRoots roots;
    roots.model = {root + "/models"};
    roots.data = {root + "/data"};
    roots.output = {root + "/out"};
    auto created = slidedp::server::PathPolicy::Create(roots);
    if (!created.ok()) __builtin_trap();
    return new slidedp::server::PathPolicy(*created);
  }();
  return policy;
}

// The rendezvous a job of several hosts may name (the daemon's --hosts_allow).
const slidedp::server::PeerPolicy* Peers() {
  static const slidedp::server::PeerPolicy* peers = [] {
    auto created = slidedp::server::PeerPolicy::Create({"127.0.0.1", "[::1]:29500", "trainer-0"});
    if (!created.ok()) __builtin_trap();
    return new slidedp::server::PeerPolicy(*created);
  }();
  return peers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  slidedp::v1::JobSpec spec;
  if (!spec.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)slidedp::server::CheckSpecWellFormed(spec);
  const slidedp::TrainConfig config = slidedp::server::JobSpecToTrainConfigUnchecked(spec);
  const slidedp::v1::JobSpec back = slidedp::server::TrainConfigToJobSpec(config);
  const slidedp::TrainConfig again = slidedp::server::JobSpecToTrainConfigUnchecked(back);
  if (slidedp::TrainConfigToJson(again) != slidedp::TrainConfigToJson(config)) __builtin_trap();
  (void)slidedp::ValidateTrainConfig(config);
  absl::StatusOr<slidedp::TrainConfig> checked =
      slidedp::server::JobSpecToTrainConfig(spec, *Policy(), *Peers());
  if (checked.ok()) {
    const slidedp::v1::JobSpec shown = slidedp::server::TrainConfigToJobSpec(*checked);
    for (const std::string* path : {&shown.model(), &shown.data().path(), &shown.output_dir(),
                                    &shown.checkpoint_dir(), &shown.data().tokenizer()}) {
      if (!slidedp::IsValidUtf8(*path)) __builtin_trap();
    }
  }
  return 0;
}
