// MetricsHttpServer on cpp-httplib. See the header for why not civetweb.
#include "server/metrics_http.h"

// Debian builds libcpp-httplib with OpenSSL support, which adds members to
// httplib::Request; the header must see the same macro to agree on the layout. (The
// zlib and brotli macros only add includes and implementation, which is in the .so.)
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#include <httplib.h>

#include <sys/socket.h>

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/listen_address.h"

namespace slidedp::server {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, std::function<std::string()> scrape) {
  absl::StatusOr<HostPort> host_port = ParseHostPort(address);
  if (!host_port.ok()) return host_port.status();
  std::unique_ptr<MetricsHttpServer> self(new MetricsHttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *self->server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_payload_max_length(64 * 1024);
  // httplib's default also sets SO_REUSEPORT, which would let a second daemon share the
  // port silently (the kernel splitting scrapes between them); SO_REUSEADDR only.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.Get("/metrics", [scrape](const httplib::Request&, httplib::Response& response) {
    response.set_content(scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("slidedpd metrics: GET /metrics\n", "text/plain; charset=utf-8");
  });
  self->host_ = host_port->host;
  if (host_port->port == 0) {
    self->port_ = server.bind_to_any_port(self->host_);
  } else {
    self->port_ = server.bind_to_port(self->host_, host_port->port) ? host_port->port : -1;
  }
  if (self->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_listen=", address, ": cannot bind (in use, or not a local address)"));
  }
  self->thread_ = std::thread([&server, done = self->listener_done_] {
    server.listen_after_bind();
    done->store(true);
  });
  return self;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (server_ && thread_.joinable()) {
    // httplib's stop() is a no-op until listen_after_bind() has marked the server
    // running; wait for that (the thread was just started) so the join cannot hang.
    while (!server_->is_running() && !listener_done_->load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    server_->stop();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace slidedp::server
