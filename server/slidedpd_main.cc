// slidedpd: the slidedp training daemon. Parses flags, starts the Daemon, waits for
// SIGINT or SIGTERM, shuts down. The main thread only waits for signals.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "runtime/data/token_cache.h"
#include "runtime/engine/trainer.h"
#include "runtime/io/file_access.h"
#include "server/daemon.h"
#include "server/log.h"
#include "server/path_policy.h"

#ifndef SLIDEDP_VERSION
#define SLIDEDP_VERSION "dev"
#endif

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address: HOST:PORT (port 0: any free port) or unix:/PATH");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus metrics HTTP address HOST:PORT, served at /metrics (port 0: any free "
          "port; empty: no endpoint)");
ABSL_FLAG(std::string, state_dir, "",
          "Directory for the daemon's state (jobs.db, the SQLite job records); created if "
          "missing. Required");
ABSL_FLAG(std::vector<std::string>, model_roots, {},
          "Comma-separated directories under which job model directories must lie "
          "(symlinks and .. are resolved first). Empty: only model presets");
ABSL_FLAG(std::vector<std::string>, data_roots, {},
          "Comma-separated directories under which job data files must lie. Empty: only "
          "synthetic data");
ABSL_FLAG(std::vector<std::string>, output_roots, {},
          "Comma-separated directories under which checkpoint_dir and output_dir must lie. "
          "Empty: no checkpoints or exports");
ABSL_FLAG(std::vector<std::string>, hosts_allow, {},
          "Comma-separated rendezvous addresses a job of several hosts may name in "
          "hosts.address: ADDRESS (any port from 1024) or ADDRESS:PORT ([V6]:PORT). The "
          "daemon connects there, or listens on the port as host 0. Empty: jobs of several "
          "hosts are refused");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate (chain); with --tls_key enables TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, token_file, "",
          "File holding a bearer token; when set every call must send "
          "\"authorization: Bearer <token>\"");
ABSL_FLAG(bool, allow_insecure_remote, false,
          "Allow --listen on a non-loopback address without TLS, and --metrics_listen on a "
          "non-loopback address");
ABSL_FLAG(double, peak_flops_per_worker, 0,
          "Peak dense FLOP/s of one worker for slidedp_mfu_ratio (0: 989.4e12, H100/H200 "
          "BF16, on cuda; not reported on cpu)");
ABSL_FLAG(int, rpc_nice, 10,
          "Nice value added to the gRPC threads that serve calls (0..19; 0: none), so that "
          "client load takes idle CPU rather than the training job's");
ABSL_FLAG(std::string, ready_file, "",
          "Once serving, write {\"listen\": ..., \"metrics_listen\": ..., \"pid\": ...} with the "
          "bound addresses to this file (for scripts and tests using port 0)");

namespace {

// The roots every file a job opens or writes must lie in when it is opened
// (runtime/io/file_access.h), checked on the open descriptor: reads under any root
// (checkpoints are read back from the output roots), writes under the output roots, the
// data roots (the token cache's default folder is beside the data file) and the user's
// cache folder (the token cache's fallback, created here when missing).
absl::StatusOr<slidedp::FileRoots> JobFileRoots(const slidedp::server::PathRoots& roots) {
  using slidedp::server::PathKind;
  absl::StatusOr<slidedp::server::PathPolicy> policy = slidedp::server::PathPolicy::Create(roots);
  if (!policy.ok()) return policy.status();
  slidedp::FileRoots files;
  for (PathKind kind : {PathKind::kModel, PathKind::kData, PathKind::kOutput}) {
    for (const std::string& root : policy->roots(kind)) files.read.push_back(root);
  }
  for (PathKind kind : {PathKind::kOutput, PathKind::kData}) {
    for (const std::string& root : policy->roots(kind)) files.write.push_back(root);
  }
  const std::vector<std::string> cache_dirs = slidedp::TokenCacheDirs("", "/data");
  for (size_t i = 1; i < cache_dirs.size(); ++i) {  // [0] is the folder beside the data
    std::error_code ec;
    std::filesystem::create_directories(cache_dirs[i], ec);
    const std::filesystem::path canonical = std::filesystem::canonical(cache_dirs[i], ec);
    if (ec) continue;  // no fallback cache; text datasets keep their tokens in memory
    files.read.push_back(canonical.string());
    files.write.push_back(canonical.string());
  }
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "slidedp training daemon: runs fine-tuning jobs submitted over gRPC "
      "(slidedp.v1.TrainingService) one at a time, exports Prometheus metrics.\n"
      "Usage: slidedpd --state_dir=DIR [--listen=ADDR] [--metrics_listen=ADDR] [flags]");
  absl::ParseCommandLine(argc, argv);

  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  slidedp::server::DaemonOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.roots.model = absl::GetFlag(FLAGS_model_roots);
  options.roots.data = absl::GetFlag(FLAGS_data_roots);
  options.roots.output = absl::GetFlag(FLAGS_output_roots);
  options.hosts_allow = absl::GetFlag(FLAGS_hosts_allow);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.token_file = absl::GetFlag(FLAGS_token_file);
  options.allow_insecure_remote = absl::GetFlag(FLAGS_allow_insecure_remote);
  options.peak_flops_per_worker = absl::GetFlag(FLAGS_peak_flops_per_worker);
  options.rpc_nice = absl::GetFlag(FLAGS_rpc_nice);
  options.ready_file = absl::GetFlag(FLAGS_ready_file);
  options.version = SLIDEDP_VERSION;
  options.trainer_factory = [](const slidedp::TrainConfig& config,
                                std::shared_ptr<const slidedp::StopToken> stop) {
    slidedp::TrainerInputs inputs;
    inputs.stop = std::move(stop);
    return slidedp::Trainer::Create(config, std::move(inputs));
  };
  absl::StatusOr<slidedp::FileRoots> file_roots = JobFileRoots(options.roots);
  if (!file_roots.ok()) {
    std::fprintf(stderr, "slidedpd: %s\n", std::string(file_roots.status().message()).c_str());
    return 1;
  }
  slidedp::SetFileRoots(*std::move(file_roots));  // before any job can run

  absl::StatusOr<std::unique_ptr<slidedp::server::Daemon>> daemon =
      slidedp::server::Daemon::Start(std::move(options));
  if (!daemon.ok()) {
    std::fprintf(stderr, "slidedpd: %s\n", std::string(daemon.status().message()).c_str());
    return 1;
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  slidedp::server::Log(signal_number == SIGINT ? "SIGINT: shutting down" : "SIGTERM: shutting down");
  (*daemon)->Shutdown();
  return 0;
}
