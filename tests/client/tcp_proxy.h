#ifndef AMPD_TESTS_CLIENT_TCP_PROXY_H_
#define AMPD_TESTS_CLIENT_TCP_PROXY_H_

// A loopback TCP proxy whose connections a test can cut, to simulate a
// dropped network connection between a client and ampd.

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace ampd::testing {

class TcpProxy {
 public:
  explicit TcpProxy(int upstream_port);
  ~TcpProxy();
  int port() const { return port_; }
  // Closes every open connection (new ones are still accepted).
  void CutAll();
  int connections_accepted() const { return accepted_.load(); }

 private:
  void AcceptLoop();
  int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

}  // namespace ampd::testing

#endif  // AMPD_TESTS_CLIENT_TCP_PROXY_H_
