#pragma once
// A scripted stand-in for an OpenAI-compatible server, on raw loopback sockets, for the load
// generator's tests: each connection is read up to its body, then handed to `handler`, which
// writes whatever it likes (with delays) and returns; the connection is then closed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace octet::testing {

struct FakeRequest {
  std::string method, path, body;
};

class FakeServer {
 public:
  using Handler = std::function<void(const FakeRequest&, int fd)>;

  explicit FakeServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(listen_fd_, 64);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeServer() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    for (auto& t : workers_) t.join();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  /// Writes all of `data` (ignores a peer that went away).
  static void send_all(int fd, const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  /// Status line and headers of a close-delimited event stream.
  static void start_sse(int fd) {
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
  }
  static void event(int fd, const std::string& json) { send_all(fd, "data: " + json + "\n\n"); }
  static void reply(int fd, int status, const std::string& body) {
    send_all(fd, "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n"
                 "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  }
  static void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

 private:
  void accept_loop() {
    while (!stop_) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (stop_) return;
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    std::string data;
    char buf[4096];
    size_t header_end = std::string::npos;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return (void)close(fd);
      data.append(buf, static_cast<size_t>(n));
    }
    FakeRequest req;
    const std::string head = data.substr(0, header_end);
    req.method = head.substr(0, head.find(' '));
    const size_t p0 = head.find(' ') + 1;
    req.path = head.substr(p0, head.find(' ', p0) - p0);
    size_t content_length = 0;
    for (const char* key : {"Content-Length: ", "content-length: "})
      if (size_t k = head.find(key); k != std::string::npos)
        content_length = std::stoul(head.substr(k + std::char_traits<char>::length(key)));
    req.body = data.substr(header_end + 4);
    while (req.body.size() < content_length) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      req.body.append(buf, static_cast<size_t>(n));
    }
    handler_(req, fd);
    shutdown(fd, SHUT_WR);
    close(fd);
  }

  Handler handler_;
  int listen_fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
};

}  // namespace octet::testing
