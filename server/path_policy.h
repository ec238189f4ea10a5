// PathPolicy: which file system paths a job may name. Model directories must lie
// under a model root, data files under a data root, checkpoint and output directories
// under an output root. Paths are made canonical (symlinks and ".." resolved) before
// they are compared, so neither can escape a root. Immutable after construction;
// safe to use from any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace slidedp::server {

enum class PathKind { kModel, kData, kOutput };

struct PathRoots {
  std::vector<std::string> model;
  std::vector<std::string> data;
  std::vector<std::string> output;
};

class PathPolicy {
 public:
  // Canonicalizes every root (each must exist and be a directory). The error names
  // the root at fault.
  static absl::StatusOr<PathPolicy> Create(const PathRoots& roots);

  // Checks `path`, the value of spec field `field`, and returns its canonical form.
  // Errors: INVALID_ARGUMENT when empty, not absolute, too long, or (with
  // `must_exist`) missing; PERMISSION_DENIED when outside every root of `kind`.
  // The root check comes before the existence check, so nothing is revealed about
  // paths outside the roots.
  absl::StatusOr<std::string> Check(const std::string& field, const std::string& path,
                                    PathKind kind, bool must_exist) const;

  const std::vector<std::string>& roots(PathKind kind) const;

 private:
  PathRoots roots_;  // canonical
};

// True when canonical path `path` is `root` or lies below it.
bool IsUnderRoot(const std::string& path, const std::string& root);

}  // namespace slidedp::server
