// MetricsHttpServer: one thread, non-blocking sockets and poll(). See the header for
// why no HTTP library. Runs on its own thread; Start/Stop from the owner's thread.
#include "server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/listen_address.h"

namespace slidedp::server {
namespace {

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

std::string Response(int status, absl::string_view reason, absl::string_view content_type,
                     absl::string_view body, bool head) {
  return absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                      head ? "" : body);
}

}  // namespace

struct MetricsHttpServer::Connection {
  int fd = -1;
  absl::Time deadline;   // closed when it passes, whatever its state
  std::string request;   // bytes read so far, up to the end of the headers
  std::string response;  // set once the request is complete
  size_t written = 0;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, std::function<std::string()> scrape, MetricsHttpLimits limits) {
  absl::StatusOr<HostPort> host_port = ParseHostPort(address);
  if (!host_port.ok()) return host_port.status();
  const auto cannot_bind = [&] {
    return absl::UnavailableError(
        absl::StrCat("--metrics_listen=", address, ": cannot bind (in use, or not a local address)"));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host_port->host.c_str(), std::to_string(host_port->port).c_str(), &hints,
                  &found) != 0) {
    return cannot_bind();
  }
  int listener = -1;
  for (addrinfo* a = found; a != nullptr && listener < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only: SO_REUSEPORT would let a second daemon share the port silently
    // (the kernel splitting scrapes between them).
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      listener = fd;
    } else {
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listener < 0) return cannot_bind();
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &bound_size);
  int port = 0;
  if (bound.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (bound.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(listener);
    return absl::InternalError(absl::StrCat("metrics server: pipe: ", std::strerror(errno)));
  }
  SetNonBlocking(listener);
  std::unique_ptr<MetricsHttpServer> self(new MetricsHttpServer());
  self->scrape_ = std::move(scrape);
  self->limits_ = limits;
  self->listener_ = listener;
  self->wake_read_ = wake[0];
  self->wake_write_ = wake[1];
  self->host_ = host_port->host;
  self->port_ = port;
  self->thread_ = std::thread([s = self.get()] { s->Serve(); });
  return self;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (thread_.joinable()) {
    const char byte = 0;
    (void)!write(wake_write_, &byte, 1);
    thread_.join();
  }
  for (int* fd : {&listener_, &wake_read_, &wake_write_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void MetricsHttpServer::Serve() {
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listener_, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (const auto& c : connections) {
      fds.push_back({c->fd, static_cast<short>(c->response.empty() ? POLLIN : POLLOUT), 0});
      next = std::min(next, c->deadline);
    }
    const absl::Duration wait = std::clamp(next - absl::Now(), absl::ZeroDuration(), absl::Seconds(1));
    const int ready = poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1);
    if (ready < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) break;  // Stop()
    const absl::Time now = absl::Now();
    // Serve the connections that are ready, then drop finished and overdue ones.
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = *connections[i];
      if (fds[2 + i].revents != 0) Advance(c);
      if (c.fd >= 0 && now >= c.deadline) {
        close(c.fd);
        c.fd = -1;
      }
    }
    connections.erase(std::remove_if(connections.begin(), connections.end(),
                                     [](const auto& c) { return c->fd < 0; }),
                      connections.end());
    if (fds[1].revents != 0) {
      for (;;) {
        const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // Out of descriptors: make room by closing the oldest connection.
          if ((errno == EMFILE || errno == ENFILE) && !connections.empty()) {
            close(connections.front()->fd);
            connections.erase(connections.begin());
            continue;
          }
          break;
        }
        if (connections.size() >= limits_.max_connections) {
          // The oldest connection gives way: a client that holds connections open cannot
          // keep a new scrape out.
          close(connections.front()->fd);
          connections.erase(connections.begin());
        }
        auto c = std::make_unique<Connection>();
        c->fd = fd;
        c->deadline = absl::Now() + limits_.connection_timeout;
        connections.push_back(std::move(c));
      }
    }
  }
  for (const auto& c : connections) close(c->fd);
}

void MetricsHttpServer::Advance(Connection& c) {
  if (c.response.empty()) {
    char buffer[4096];
    const ssize_t n = read(c.fd, buffer, sizeof(buffer));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      close(c.fd);
      c.fd = -1;
      return;
    }
    if (n < 0) return;
    c.request.append(buffer, static_cast<size_t>(n));
    const size_t end = c.request.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.request.size() > kMaxRequestBytes) {
        c.response = Response(431, "Request Header Fields Too Large", "text/plain; charset=utf-8",
                              "request headers too large\n", false);
      }
      return;
    }
    c.response = Answer(c.request.substr(0, c.request.find("\r\n")));
    c.request.clear();
  }
  const ssize_t n = write(c.fd, c.response.data() + c.written, c.response.size() - c.written);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0) c.written += static_cast<size_t>(n);
  if (n < 0 || c.written == c.response.size()) {
    shutdown(c.fd, SHUT_WR);
    close(c.fd);
    c.fd = -1;
  }
}

std::string MetricsHttpServer::Answer(const std::string& request_line) {
  const std::vector<std::string> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Response(400, "Bad Request", "text/plain; charset=utf-8", "bad request\n", false);
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    return Response(405, "Method Not Allowed", "text/plain; charset=utf-8", "GET /metrics\n", false);
  }
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path == "/metrics") {
    return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", scrape_(), head);
  }
  if (path == "/") {
    return Response(200, "OK", "text/plain; charset=utf-8", "slidedpd metrics: GET /metrics\n", head);
  }
  return Response(404, "Not Found", "text/plain; charset=utf-8", "not found; GET /metrics\n", head);
}

}  // namespace slidedp::server
