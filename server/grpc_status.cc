// Conversion of absl::Status to grpc::Status. Stateless.
#include "server/grpc_status.h"

#include <string>

#include "runtime/io/user_text.h"

namespace slidedp::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both follow google.rpc.Code: 1 .. 16.
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code = (code >= 1 && code <= 16)
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::StatusCode::UNKNOWN;
  // Messages quote runtime text (file contents, paths): clients decode them as UTF-8.
  const absl::string_view message = status.message();
  return grpc::Status(grpc_code, ValidUtf8(std::string_view(message.data(), message.size())));
}

}  // namespace slidedp::server
