// Daemon: slidedpd assembled from its options: the job store in the state directory,
// the path policy, metrics and their HTTP endpoint, the job manager, and the gRPC
// server (TrainingService, health service, reflection). Start, then Shutdown, from one
// thread (main); the parts run their own threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/job_manager.h"
#include "server/path_policy.h"
#include "server/peer_policy.h"

namespace grpc {
class Server;
}

namespace slidedp::server {

class JobStore;
class Metrics;
class MetricsHttpServer;
class TrainingServiceImpl;

struct DaemonOptions {
  std::string listen = "127.0.0.1:50051";  // HOST:PORT or unix:PATH; port 0: any free port
  std::string metrics_listen = "127.0.0.1:9464";  // HOST:PORT; empty: no metrics endpoint
  std::string state_dir;                   // required; created if missing
  PathRoots roots;
  std::vector<std::string> hosts_allow;    // PeerPolicy entries; empty: no job of several hosts
  std::string tls_cert_file;               // PEM; with tls_key_file: TLS
  std::string tls_key_file;
  std::string token_file;                  // bearer token required of every call when set
  bool allow_insecure_remote = false;      // listen off-loopback without TLS
  double peak_flops_per_worker = 0.0;      // see JobManagerOptions
  std::string ready_file;                  // JSON with the bound addresses, once serving
  TrainerFactory trainer_factory;          // required
  std::string version;
  int rpc_nice = 10;                       // see ServiceOptions::rpc_nice
};

class Daemon {
 public:
  // Checks the options (errors name the flag), opens the state, binds both listeners
  // and starts serving.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();

  // Stops taking calls (open streams are cancelled), stops the job thread at the next
  // step boundary, then the metrics endpoint. Idempotent.
  void Shutdown();

  const std::string& listen_address() const { return listen_address_; }     // bound
  const std::string& metrics_address() const { return metrics_address_; }   // bound

 private:
  Daemon() = default;
  absl::Status StartGrpc(const DaemonOptions& options);
  absl::Status WriteReadyFile(const std::string& path) const;

  std::unique_ptr<JobStore> store_;
  std::unique_ptr<PathPolicy> paths_;
  std::unique_ptr<PeerPolicy> peers_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TrainingServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string listen_address_;
  std::string metrics_address_;
};

// Reads a bearer token file: its content without surrounding whitespace; an empty or
// unreadable file is an error naming it.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace slidedp::server
