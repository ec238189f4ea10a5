// Parsing and classification of listen addresses ("HOST:PORT", "[V6]:PORT",
// "unix:/path"). Stateless; any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace slidedp::server {

struct HostPort {
  std::string host;  // without brackets
  int port = 0;      // 0..65535
};

// "127.0.0.1:9464", "localhost:0", "[::1]:50051". Errors name the address.
absl::StatusOr<HostPort> ParseHostPort(const std::string& address);

// True for unix-domain sockets ("unix:PATH", "unix-abstract:NAME") and for hosts that
// are loopback: localhost, 127.0.0.0/8, ::1. Unparsable addresses are not loopback.
bool IsLoopbackAddress(const std::string& address);

}  // namespace slidedp::server
