// PathPolicy: canonicalization and root checks of job paths. Immutable; any thread.
#include "server/path_policy.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/io/file_access.h"

namespace slidedp::server {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxPathBytes = 4096;

absl::string_view KindName(PathKind kind) {
  switch (kind) {
    case PathKind::kModel: return "--model_roots";
    case PathKind::kData: return "--data_roots";
    case PathKind::kOutput: return "--output_roots";
  }
  return "?";
}

absl::StatusOr<std::vector<std::string>> CanonicalRoots(const std::vector<std::string>& roots,
                                                        absl::string_view flag) {
  std::vector<std::string> out;
  for (const std::string& root : roots) {
    if (root.empty()) continue;
    std::error_code ec;
    fs::path canonical = fs::canonical(root, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": root \"", EchoPath(root), "\": ", ec.message()));
    }
    if (!fs::is_directory(canonical, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": root \"", EchoPath(root), "\" is not a directory"));
    }
    out.push_back(canonical.string());
  }
  return out;
}

}  // namespace

bool IsUnderRoot(const std::string& path, const std::string& root) {
  return PathIsUnderRoot(path, root);  // the rule the runtime applies when it opens files
}

absl::StatusOr<PathPolicy> PathPolicy::Create(const PathRoots& roots) {
  PathPolicy policy;
  absl::StatusOr<std::vector<std::string>> model = CanonicalRoots(roots.model, "--model_roots");
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<std::string>> data = CanonicalRoots(roots.data, "--data_roots");
  if (!data.ok()) return data.status();
  absl::StatusOr<std::vector<std::string>> output =
      CanonicalRoots(roots.output, "--output_roots");
  if (!output.ok()) return output.status();
  policy.roots_ = PathRoots{*std::move(model), *std::move(data), *std::move(output)};
  return policy;
}

const std::vector<std::string>& PathPolicy::roots(PathKind kind) const {
  switch (kind) {
    case PathKind::kModel: return roots_.model;
    case PathKind::kData: return roots_.data;
    case PathKind::kOutput: break;
  }
  return roots_.output;
}

absl::StatusOr<std::string> PathPolicy::Check(const std::string& field, const std::string& path,
                                              PathKind kind, bool must_exist) const {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty path"));
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": path of ", path.size(),
                                                   " bytes, longer than ", kMaxPathBytes));
  }
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": path contains a NUL byte"));
  }
  if (path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", EchoPath(path), "\" is not an absolute path"));
  }
  std::error_code ec;
  // weakly_canonical resolves symlinks in the existing prefix and ".." everywhere.
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": \"", EchoPath(path), "\": ", ec.message()));
  }
  const std::vector<std::string>& allowed = roots(kind);
  bool inside = false;
  for (const std::string& root : allowed) inside = inside || IsUnderRoot(canonical, root);
  if (!inside) {
    return absl::PermissionDeniedError(absl::StrCat(
        field, ": \"", EchoPath(path), "\" (resolved to \"", EchoPath(canonical),
        "\") is outside the allowed roots [", EchoPath(absl::StrJoin(allowed, ", ")), "] of ",
        KindName(kind)));
  }
  if (must_exist && !fs::exists(canonical, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": \"", EchoPath(path), "\" does not exist"));
  }
  return canonical;
}

}  // namespace slidedp::server
