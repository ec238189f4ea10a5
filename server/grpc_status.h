// Conversion of absl::Status to grpc::Status for the service handlers. Stateless.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace slidedp::server {

// Same code (absl and gRPC share the canonical numbering), same message made valid
// UTF-8 (ValidUtf8).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace slidedp::server
