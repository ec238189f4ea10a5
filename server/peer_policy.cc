// PeerPolicy: see peer_policy.h.
#include "server/peer_policy.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/io/user_text.h"
#include "server/listen_address.h"

namespace slidedp::server {
namespace {

// Lower case, brackets of an IPv6 address taken off.
std::string Normalized(std::string address) {
  if (address.size() >= 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  return absl::AsciiStrToLower(address);
}

constexpr int kLowestAnyPort = 1024;

}  // namespace

absl::StatusOr<PeerPolicy> PeerPolicy::Create(const std::vector<std::string>& allowed) {
  PeerPolicy p;
  for (const std::string& raw : allowed) {
    const std::string entry(absl::StripAsciiWhitespace(raw));
    if (entry.empty()) continue;
    Entry e;
    const size_t colon = entry.rfind(':');
    const bool bracketed = !entry.empty() && entry.front() == '[';
    const bool has_port = colon != std::string::npos &&
                          (bracketed ? colon > 0 && entry[colon - 1] == ']' : entry.find(':') == colon);
    if (has_port) {
      absl::StatusOr<HostPort> hp = ParseHostPort(entry);
      if (!hp.ok() || hp->port < 1) {
        return absl::InvalidArgumentError(absl::StrCat("--hosts_allow: \"", Echo(entry),
                                                       "\" is not ADDRESS or ADDRESS:PORT with a port 1-65535"));
      }
      e.address = Normalized(hp->host);
      e.port = hp->port;
    } else {
      e.address = Normalized(entry);  // a name, an IPv4 address or a bare IPv6 address
    }
    if (e.address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--hosts_allow: \"", Echo(entry), "\" names no address"));
    }
    p.entries_.push_back(std::move(e));
  }
  return p;
}

const PeerPolicy& PeerPolicy::None() {
  static const PeerPolicy* none = new PeerPolicy();
  return *none;
}

absl::Status PeerPolicy::Check(const HostsConfig& hosts) const {
  if (hosts.count <= 1) return absl::OkStatus();
  const std::string address = Normalized(hosts.address);
  for (const Entry& e : entries_) {
    if (e.address != address) continue;
    if (e.port == hosts.port || (e.port == 0 && hosts.port >= kLowestAnyPort)) return absl::OkStatus();
  }
  if (entries_.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "hosts: this daemon runs no job of several hosts (hosts.count ", hosts.count,
        "); its operator allows the rendezvous addresses with --hosts_allow=ADDRESS[:PORT],..."));
  }
  std::vector<std::string> shown;
  for (const Entry& e : entries_) {
    const bool v6 = e.address.find(':') != std::string::npos;
    shown.push_back(e.port == 0 ? e.address : absl::StrCat(v6 ? "[" : "", e.address, v6 ? "]" : "", ":", e.port));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "hosts.address \"", Echo(hosts.address), "\" port ", hosts.port,
      " is not allowed by this daemon's --hosts_allow (", absl::StrJoin(shown, ","),
      "; an entry without a port allows ports from ", kLowestAnyPort, ")"));
}

}  // namespace slidedp::server
