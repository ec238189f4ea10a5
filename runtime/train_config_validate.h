// What TrainConfig's validation shares with its parser: the first problem of a config
// (field and message) and the error that names a field. ValidateTrainConfig reports
// the problem alone; ParseTrainConfig (train_config.cc) adds the file and line of the
// field. Internal to runtime/train_config*.cc; everything else calls
// ValidateTrainConfig (train_config.h). Plain functions; no threads.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "runtime/train_config.h"

namespace slidedp {
namespace train_config_internal {

struct Problem {
  std::string field;
  std::string what;  // "must be ..., got ..."
};

// The first field of `c` out of range or not one of its values, in a fixed order:
// shape, data, optimizer, policy, run. nullopt when there is none.
std::optional<Problem> FindProblem(const TrainConfig& c);

// INVALID_ARGUMENT "field 'FIELD'WHERE WHAT"; `where` is "" or " in SOURCE at line N".
absl::Status FieldError(const std::string& field, const std::string& where,
                        const std::string& what);

}  // namespace train_config_internal
}  // namespace slidedp
