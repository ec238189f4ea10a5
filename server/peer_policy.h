// PeerPolicy: which other hosts a job of several hosts (issue 24) may name, from the
// daemon's --hosts_allow. A spec's hosts.address is where this daemon connects for the
// rendezvous (and, as host 0, hosts.port is a port it listens on): without a list of its
// own a client could make the daemon open connections anywhere or listen on any port.
// Immutable after construction; any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/train_config.h"

namespace slidedp::server {

class PeerPolicy {
 public:
  // Each entry "ADDRESS" (any rendezvous port from 1024) or "ADDRESS:PORT" ("[V6]:PORT"
  // for IPv6), compared with hosts.address as written (names case-insensitively).
  // Empty: no job of several hosts. INVALID_ARGUMENT naming a malformed entry.
  static absl::StatusOr<PeerPolicy> Create(const std::vector<std::string>& allowed);
  // The policy of no entries.
  static const PeerPolicy& None();

  // OK for a job of one host, or one whose hosts.address (and port) an entry allows;
  // PERMISSION_DENIED naming the address, the port and --hosts_allow otherwise.
  absl::Status Check(const HostsConfig& hosts) const;

 private:
  struct Entry {
    std::string address;  // lower case, without brackets
    int port = 0;         // 0: any from 1024
  };
  std::vector<Entry> entries_;
};

}  // namespace slidedp::server
