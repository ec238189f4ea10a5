// Daemon: wiring of slidedpd's parts. Start/Shutdown from the main thread.
#include "server/daemon.h"

#include "runtime/io/file_access.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/job_store.h"
#include "server/listen_address.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/service.h"
#include "server/spec_translation.h"

namespace slidedp::server {
namespace {

constexpr int kMaxMessageBytes = 4 * 1024 * 1024;
constexpr const char* kServiceName = "slidedp.v1.TrainingService";

// The daemon's own files (certificate, key, token), named by the operator: regular
// files only, opened without blocking (a FIFO there is an error at start, not a daemon
// that never starts), and not under the jobs' roots.
absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, size_t{1} << 20, FileOwner::kDaemon);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", text.status().message()));
  return text;
}

absl::Status CheckExposure(const DaemonOptions& o, bool tls) {
  if (!IsLoopbackAddress(o.listen) && !tls && !o.allow_insecure_remote) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--listen=", o.listen, " is not a loopback address: give --tls_cert and --tls_key, "
        "or --allow_insecure_remote to serve without TLS"));
  }
  if (!o.metrics_listen.empty() && !IsLoopbackAddress(o.metrics_listen) &&
      !o.allow_insecure_remote) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--metrics_listen=", o.metrics_listen, " is not a loopback address and the metrics "
        "endpoint is plain HTTP: give --allow_insecure_remote to expose it"));
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const DaemonOptions& o) {
  if (o.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadFile(o.tls_cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(o.tls_key_file, "--tls_key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

// `address` with its port replaced by the bound one (TCP only).
std::string BoundAddress(const std::string& address, int port) {
  if (address.rfind("unix", 0) == 0 || port <= 0) return address;
  const size_t colon = address.rfind(':');
  return absl::StrCat(address.substr(0, colon), ":", port);
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, "--token_file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("--token_file=", path, ": empty"));
  return token;
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  if (options.state_dir.empty()) return absl::InvalidArgumentError("--state_dir is required");
  if (!options.trainer_factory) return absl::InvalidArgumentError("Daemon: no trainer factory");
  if (options.rpc_nice < 0 || options.rpc_nice > 19) {
    return absl::InvalidArgumentError(absl::StrCat("--rpc_nice=", options.rpc_nice, ": not in 0..19"));
  }
  const bool tls = !options.tls_cert_file.empty();
  if (absl::Status s = CheckExposure(options, tls); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state_dir=", options.state_dir, ": ", ec.message()));
  }
  std::unique_ptr<Daemon> d(new Daemon());
  absl::StatusOr<PathPolicy> paths = PathPolicy::Create(options.roots);
  if (!paths.ok()) return paths.status();
  d->paths_ = std::make_unique<PathPolicy>(*std::move(paths));
  absl::StatusOr<PeerPolicy> peers = PeerPolicy::Create(options.hosts_allow);
  if (!peers.ok()) return peers.status();
  d->peers_ = std::make_unique<PeerPolicy>(*std::move(peers));
  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open((std::filesystem::path(options.state_dir) / "jobs.db").string());
  if (!store.ok()) return store.status();
  d->store_ = *std::move(store);
  d->metrics_ = std::make_unique<Metrics>(options.version);
  if (!options.metrics_listen.empty()) {
    Metrics* metrics = d->metrics_.get();
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(options.metrics_listen, [metrics] { return metrics->Scrape(); });
    if (!http.ok()) return http.status();
    d->metrics_http_ = *std::move(http);
    d->metrics_address_ = BoundAddress(options.metrics_listen, d->metrics_http_->port());
  }
  JobManagerOptions jobs;
  jobs.store = d->store_.get();
  jobs.trainer_factory = options.trainer_factory;
  const PathPolicy* policy = d->paths_.get();
  const PeerPolicy* peer_policy = d->peers_.get();
  jobs.translator = [policy, peer_policy](const v1::JobSpec& spec) {
    return StoredSpecToTrainConfig(spec, *policy, *peer_policy);
  };
  jobs.metrics = d->metrics_.get();
  jobs.peak_flops_per_worker = options.peak_flops_per_worker;
  absl::StatusOr<std::unique_ptr<JobManager>> manager = JobManager::Start(std::move(jobs));
  if (!manager.ok()) return manager.status();
  d->jobs_ = *std::move(manager);
  if (absl::Status s = d->StartGrpc(options); !s.ok()) return s;
  if (!options.ready_file.empty()) {
    if (absl::Status s = d->WriteReadyFile(options.ready_file); !s.ok()) return s;
  }
  Log(absl::StrCat("serving gRPC on ", d->listen_address_,
                   d->metrics_address_.empty() ? "" : ", metrics on http://" + d->metrics_address_ + "/metrics",
                   ", state in ", options.state_dir));
  return d;
}

absl::Status Daemon::StartGrpc(const DaemonOptions& options) {
  std::string token;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(options.token_file);
    if (!read.ok()) return read.status();
    token = *read;
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  service_ = std::make_unique<TrainingServiceImpl>(
      ServiceOptions{jobs_.get(), paths_.get(), token, options.version, options.rpc_nice, peers_.get()});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, *credentials, &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  const bool tcp = options.listen.rfind("unix", 0) != 0;
  if (server_ == nullptr || (tcp && port == 0)) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat(
        "--listen=", options.listen, ": cannot listen (address in use or not local)"));
  }
  server_->GetHealthCheckService()->SetServingStatus(kServiceName, true);
  listen_address_ = BoundAddress(options.listen, port);
  return absl::OkStatus();
}

absl::Status Daemon::WriteReadyFile(const std::string& path) const {
  nlohmann::json ready = {{"listen", listen_address_},
                          {"metrics_listen", metrics_address_},
                          {"pid", static_cast<int64_t>(getpid())}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << ready.dump() << "\n";
    if (!out) return absl::InvalidArgumentError(absl::StrCat("--ready_file=", path, ": cannot write"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--ready_file=", path, ": ", ec.message()));
  return absl::OkStatus();
}

void Daemon::Shutdown() {
  if (server_) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
  }
  if (jobs_) jobs_->Shutdown();
  if (metrics_http_) metrics_http_->Stop();
}

Daemon::~Daemon() { Shutdown(); }

}  // namespace slidedp::server
