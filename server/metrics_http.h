// MetricsHttpServer: serves the Prometheus text exposition on GET /metrics over plain
// HTTP, with cpp-httplib (Debian libcpp-httplib-dev), from its own listener thread and
// a small pool of std::thread workers. Start/Stop from one thread; the scrape function
// is called from the pool and must be thread-safe.
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
// cpp-httplib uses std::thread, i.e. the default stack size (RLIMIT_STACK, 8 MiB),
// which glibc sizes to hold the static TLS, so it works there.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace slidedp::server {

class MetricsHttpServer {
 public:
  // Binds `address` ("HOST:PORT", "[V6]:PORT"; port 0 picks a free port) and starts
  // serving GET /metrics with the text `scrape` returns. Errors name the address.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> scrape);
  ~MetricsHttpServer();  // Stop()s

  // Stops listening and joins the listener thread. Idempotent.
  void Stop();

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::shared_ptr<std::atomic<bool>> listener_done_ = std::make_shared<std::atomic<bool>>(false);
  std::string host_;
  int port_ = 0;
};

}  // namespace slidedp::server
