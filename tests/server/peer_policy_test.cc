// PeerPolicy (--hosts_allow): which rendezvous a job of several hosts may name; and the
// spec translation refusing the others before anything connects.
#include "server/peer_policy.h"

#include <gtest/gtest.h>

#include "server/spec_translation.h"

namespace slidedp::server {
namespace {

HostsConfig Hosts(const std::string& address, int port, int count = 2) {
  HostsConfig h;
  h.count = count;
  h.rank = 1;
  h.address = address;
  h.port = port;
  return h;
}

TEST(PeerPolicy, NoEntriesRefusesEveryJobOfSeveralHostsNamingTheFlag) {
  const absl::Status s = PeerPolicy::None().Check(Hosts("10.0.0.1", 29500));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("--hosts_allow"), std::string::npos) << s;
  // One host names no peer.
  EXPECT_TRUE(PeerPolicy::None().Check(Hosts("", 29500, 1)).ok());
  EXPECT_TRUE(PeerPolicy::None().Check(Hosts("169.254.169.254", 80, 1)).ok());
}

TEST(PeerPolicy, EntriesAllowTheirAddressAndPort) {
  absl::StatusOr<PeerPolicy> p = PeerPolicy::Create({"10.0.0.1", "Trainer-0.example:29600", "[fd00::1]:29500", "::2"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->Check(Hosts("10.0.0.1", 29500)).ok());
  EXPECT_TRUE(p->Check(Hosts("10.0.0.1", 1024)).ok());
  // Without a port an entry allows no privileged port.
  const absl::Status low = p->Check(Hosts("10.0.0.1", 22));
  EXPECT_EQ(low.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(low.message().find("port 22"), std::string::npos) << low;
  // Names compare case-insensitively; a port entry allows that port only.
  EXPECT_TRUE(p->Check(Hosts("trainer-0.EXAMPLE", 29600)).ok());
  EXPECT_FALSE(p->Check(Hosts("trainer-0.example", 29601)).ok());
  EXPECT_TRUE(p->Check(Hosts("fd00::1", 29500)).ok());
  EXPECT_TRUE(p->Check(Hosts("[fd00::1]", 29500)).ok());
  EXPECT_TRUE(p->Check(Hosts("::2", 30000)).ok());
  // Anything else, named in the error with the list.
  const absl::Status other = p->Check(Hosts("169.254.169.254", 29500));
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("169.254.169.254"), std::string::npos) << other;
  EXPECT_NE(other.message().find("10.0.0.1"), std::string::npos) << other;
  EXPECT_FALSE(p->Check(Hosts("10.0.0.10", 29500)).ok());
  // The address is echoed on one line and short.
  const absl::Status odd = p->Check(Hosts("a\nb" + std::string(5000, 'x'), 29500));
  EXPECT_EQ(odd.message().find('\n'), std::string::npos) << odd;
  EXPECT_LT(odd.message().size(), 1000u) << odd;
}

TEST(PeerPolicy, MalformedEntriesAreRefusedNamingThem) {
  for (const std::string bad : {"10.0.0.1:", "10.0.0.1:0", "10.0.0.1:70000", "host:port", ":29500"}) {
    const absl::StatusOr<PeerPolicy> p = PeerPolicy::Create({bad});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(bad), std::string::npos) << p.status();
  }
  EXPECT_TRUE(PeerPolicy::Create({"", " 10.0.0.1 "}).ok());
}

TEST(PeerPolicy, TheSpecTranslationRefusesARendezvousTheDaemonDoesNotAllow) {
  v1::JobSpec spec;
  spec.set_model("tiny");
  spec.mutable_hosts()->set_count(2);
  spec.mutable_hosts()->set_rank(1);
  spec.mutable_hosts()->set_address("169.254.169.254");
  spec.mutable_hosts()->set_port(29500);
  const PathPolicy paths = *PathPolicy::Create(PathRoots{});
  absl::StatusOr<TrainConfig> refused = JobSpecToTrainConfig(spec, paths);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_FALSE(StoredSpecToTrainConfig(spec, paths).ok());
  const PeerPolicy allowed = *PeerPolicy::Create({"169.254.169.254:29500"});
  absl::StatusOr<TrainConfig> ok = JobSpecToTrainConfig(spec, paths, allowed);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->hosts.count, 2);
  EXPECT_TRUE(StoredSpecToTrainConfig(spec, paths, allowed).ok());
}

}  // namespace
}  // namespace slidedp::server
