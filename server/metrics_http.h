#ifndef AMPD_SERVER_METRICS_HTTP_H_
#define AMPD_SERVER_METRICS_HTTP_H_

// The smallest HTTP/1.1 server Prometheus needs: GET /metrics answers with
// the text exposition format, anything else 404 (405 for other methods),
// one connection at a time on its own thread, each closed after its
// response. Its own rather than prometheus-cpp's civetweb exposer, which
// binds the port but then fails to start inside ampd, and which cannot
// bind port 0 (tests run many servers at once).

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace ampd::server {

class MetricsHttpServer {
 public:
  // Listens on HOST:PORT (an IPv4 address or "localhost"; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::function<std::string()> body);
  ~MetricsHttpServer();  // stops accepting and joins the thread
  int port() const { return port_; }

 private:
  MetricsHttpServer(int fd, int port, std::function<std::string()> body);
  void Loop();
  void Serve(int connection);

  int fd_;
  int port_;
  std::function<std::string()> body_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_METRICS_HTTP_H_
