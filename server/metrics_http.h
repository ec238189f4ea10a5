// MetricsHttpServer: serves the Prometheus text exposition on GET /metrics over plain
// HTTP/1.1 from one thread of its own, with non-blocking sockets and poll(): every
// connection is read and answered as its bytes arrive, then closed (Connection: close).
// No client can hold the server: a connection has connection_timeout to send its request
// and take the answer, and at max_connections the oldest one gives way to a new one.
// So idle, half-sent or never-read connections, however many, do not keep a scrape
// waiting (issue 18; a thread-pool server such as cpp-httplib's gives each connection a
// worker for up to its read timeout, and a client trickling bytes keeps it for good).
// Start/Stop from one thread; the scrape function is called from the server's thread
// and must be thread-safe (and quick: it holds up the other connections meanwhile).
//
// Why not prometheus-cpp's pull Exposer (civetweb): it cannot start in a process that
// has libtorch_cuda.so loaded ("Cannot create first worker thread: error 29", see
// /work/shared/GPU_HOST.md). Cause, with evidence:
//  1. civetweb creates every thread with a fixed stack size: its CMakeLists.txt sets
//     CIVETWEB_THREAD_STACK_SIZE 102400 and -DUSE_STACK_SIZE=..., and
//     mg_start_thread_with_id calls pthread_attr_setstacksize(&attr, USE_STACK_SIZE).
//     Debian's libcivetweb.so.1 (1.15) has it compiled in: objdump shows
//     `mov $0x19000,%esi; call pthread_attr_setstacksize@plt` at both thread starts.
//     It is compile-time only; no civetweb option (and so no Exposer option) changes it.
//  2. glibc's allocate_stack (nptl/allocatestack.c) returns EINVAL when the requested
//     stack is smaller than guard + static TLS + MINIMAL_REST_STACK. Libraries loaded
//     at startup put their TLS in the static TLS block; with libtorch_cuda.so that
//     block exceeds 100 KiB (PT_TLS measured on the H200 host: libcublasLt.so.13
//     0x17020, libtorch_cpu.so 0x66d8, libcusparseLt 0x4020, libcublas 0x3020,
//     libnccl 0x3000, ... about 165 KiB in all).
//  3. Measured on the H200 host (glibc 2.39): pthread_create with a 102400-byte stack
//     returns 22 (EINVAL) with libtorch_cuda.so preloaded and succeeds without it or
//     with only libtorch_cpu.so; 256 KiB and the default stack succeed either way.
//     pthread_create returns its error and leaves errno alone, so civetweb's message
//     prints a stale errno (29, ESPIPE) instead of EINVAL.
// A plain std::thread has the default stack size (RLIMIT_STACK, 8 MiB), which glibc sizes
// to hold the static TLS, so it works there.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace slidedp::server {

struct MetricsHttpLimits {
  size_t max_connections = 256;
  absl::Duration connection_timeout = absl::Seconds(10);
};

class MetricsHttpServer {
 public:
  // Binds `address` ("HOST:PORT", "[V6]:PORT"; port 0 picks a free port) and starts
  // serving GET /metrics with the text `scrape` returns. Errors name the address.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> scrape,
      MetricsHttpLimits limits = {});
  ~MetricsHttpServer();  // Stop()s

  // Stops listening, closes every connection and joins the thread. Idempotent.
  void Stop();

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  struct Connection;
  static constexpr size_t kMaxRequestBytes = 16 * 1024;

  MetricsHttpServer() = default;
  void Serve();                    // the server's thread
  void Advance(Connection& c);     // reads or writes what the socket allows
  std::string Answer(const std::string& request_line);

  std::function<std::string()> scrape_;
  MetricsHttpLimits limits_;
  int listener_ = -1;
  int wake_read_ = -1;   // Stop() writes to wake_write_ to end Serve()
  int wake_write_ = -1;
  std::thread thread_;
  std::string host_;
  int port_ = 0;
};

}  // namespace slidedp::server
