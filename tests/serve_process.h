#pragma once
// Running the real `octet serve` on stories260K in a test, and speaking raw HTTP/1.1 to it over
// loopback POSIX sockets (tests/server/test_http_server.cpp, test_serve_limits.cpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace {

using namespace std::chrono_literals;

const std::string kStories = std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf";

/// The binary under test: OCTET_BINARY, or $OCTET_TEST_BINARY (to run these tests against
/// another build, e.g. an older one).
std::string octet_binary() {
  const char* env = std::getenv("OCTET_TEST_BINARY");
  return env && *env ? env : OCTET_BINARY;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Starts argv[0] with argv in a child process, its stdout and stderr in the file `log`
/// (created or truncated), with RLIMIT_NOFILE set to nofile when non-zero. Returns the pid.
pid_t spawn_logged(std::vector<std::string> argv, const std::string& log, rlim_t nofile = 0) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    if (nofile) {
      rlimit r{nofile, nofile};
      setrlimit(RLIMIT_NOFILE, &r);
    }
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

/// `octet serve` on stories260K (or `model`) in a child process; its log goes to a file.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra, rlim_t nofile = 0,
                        const std::string& model = kStories) {
    static int counter = 0;
    log_ = "/tmp/octet_http_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) +
           ".log";
    std::vector<std::string> args = {octet_binary(), "serve", "--model", model, "--host",
                                     "127.0.0.1", "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = spawn_logged(args, log_, nofile);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string text = slurp(log_);
      std::smatch m;
      if (port_ == 0 && std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
      if (port_ && text.find("ready, serving") != std::string::npos) return;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("octet serve exited at start-up:\n" << text);
      }
      std::this_thread::sleep_for(20ms);
    }
    FAIL("octet serve did not get ready:\n" << slurp(log_));
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(log_.c_str());
  }
  int port() const { return port_; }
  std::string log() const { return slurp(log_); }
  pid_t pid() const { return pid_; }
  /// Sends `sig` to the server.
  void signal(int sig) const {
    if (pid_ > 0) kill(pid_, sig);
  }
  /// The server's exit code once it exits within timeout_s (then it is gone), else -1.
  int wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(timeout_s);
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

/// A base port P with P, P + 1 and P + 2 free on loopback (multi-node's node 0 listens on all
/// three); tests that may run at once pass different (a, b) to start their search elsewhere.
inline int free_port_triple(int a, int b) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = 20000 + static_cast<int>((getpid() * a + attempt * b) % 40000);
    bool ok = true;
    for (int p = base; p < base + 3 && ok; ++p) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(p));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      close(fd);
    }
    if (ok) return base;
  }
  FAIL("no three free consecutive ports");
  return 0;
}

/// A connected loopback socket with a receive timeout.
int connect_to(int port, double timeout_s = 10) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{static_cast<time_t>(timeout_s),
             static_cast<suseconds_t>((timeout_s - static_cast<time_t>(timeout_s)) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<size_t>(n);
  }
}

struct Received {
  std::string bytes;
  bool closed = false;  // the server closed the connection (EOF or reset), not a timeout
};

/// Reads until the server closes the connection or the receive timeout passes.
Received read_all(int fd) {
  Received r;
  std::array<char, 65536> buf{};
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n > 0) {
      r.bytes.append(buf.data(), static_cast<size_t>(n));
      continue;
    }
    r.closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    return r;
  }
}

/// Sends one raw request on a fresh connection and reads until close or timeout.
inline Received roundtrip(int port, const std::string& request, double timeout_s = 10) {
  const int fd = connect_to(port, timeout_s);
  send_all(fd, request);
  Received r = read_all(fd);
  close(fd);
  return r;
}

inline std::string post(const std::string& path, const std::string& body,
                        const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + extra_headers +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}


}  // namespace
