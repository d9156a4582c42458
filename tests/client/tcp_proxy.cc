#include "tests/client/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ampd::testing {
namespace {

void Pump(int from, int to) {
  char buf[16384];
  while (true) {
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0) break;
    ssize_t off = 0;
    while (off < n) {
      // MSG_NOSIGNAL: a peer that is gone must not SIGPIPE the test.
      ssize_t w = send(to, buf + off, n - off, MSG_NOSIGNAL);
      if (w <= 0) {
        shutdown(from, SHUT_RDWR);
        return;
      }
      off += w;
    }
  }
  shutdown(to, SHUT_RDWR);
}

}  // namespace

TcpProxy::TcpProxy(int upstream_port) : upstream_port_(upstream_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  listen(listen_fd_, 64);
  socklen_t len = sizeof addr;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

void TcpProxy::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    int upstream = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(upstream_port_);
    if (connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(client);
      close(upstream);
      continue;
    }
    ++accepted_;
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(client);
    fds_.push_back(upstream);
    pumps_.emplace_back(Pump, client, upstream);
    pumps_.emplace_back(Pump, upstream, client);
  }
}

void TcpProxy::CutAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  acceptor_.join();
  CutAll();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : pumps_) t.join();
  for (int fd : fds_) close(fd);
  close(listen_fd_);
}

}  // namespace ampd::testing
