// Multi-node start-up under idle connections (issue 23 item 11), with the real `octet` binary:
// 30 connections that never send a byte (a port scanner, a stuck process) wait on each of node
// 0's ports (master_port .. + 2) while the two nodes start. Node 0 used to read one hello at a
// time with a 10 s limit each (30 x 10 s: the whole 300 s start-up deadline); it now reads all
// hellos at once, each within 2 s, so the nodes form the group and generate as usual.
#include <atomic>
#include <mutex>

#include "serve_process.h"

namespace {

using namespace std::chrono_literals;

/// The exit code of `pid` once it ends within timeout_s; -1 (and the process killed) if not.
int exit_code(pid_t pid, double timeout_s) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(20ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

}  // namespace

TEST_CASE("multi-node: 30 idle connections on each of node 0's ports do not stop the start-up",
          "[multinode]") {
  const int port = free_port_triple(53, 97);
  auto args = [&](int rank) {
    return std::vector<std::string>{
        octet_binary(), "generate",  "--model",         kStories,        "--prompt",
        "Once upon",    "--max-tokens", "4",            "--device",      "cpu",
        "--tensor-parallel-size", "2", "--nnodes",      "2",             "--node-rank",
        std::to_string(rank),     "--master-addr",      "127.0.0.1",     "--master-port",
        std::to_string(port)};
  };
  const std::string log0 = "/tmp/octet_multinode_idle_" + std::to_string(getpid()) + "_0.log";
  const std::string log1 = "/tmp/octet_multinode_idle_" + std::to_string(getpid()) + "_1.log";
  const pid_t node0 = spawn_logged(args(0), log0);

  // Idle connections: per port, 30 connects as soon as it listens (node 0 opens the ports one
  // after the other as the start-up proceeds), held until the end.
  std::mutex mu;
  std::vector<int> idle;
  std::atomic<bool> stop{false};
  std::atomic<int> first_port_idle{0};
  std::vector<std::thread> openers;
  for (int p = port; p < port + 3; ++p)
    openers.emplace_back([&, p] {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(p));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      int opened = 0;
      while (opened < 30 && !stop) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
          close(fd);
          std::this_thread::sleep_for(10ms);
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        idle.push_back(fd);
        ++opened;
        if (p == port) ++first_port_idle;
      }
    });
  for (int i = 0; i < 500 && first_port_idle < 30; ++i) std::this_thread::sleep_for(10ms);
  const pid_t node1 = spawn_logged(args(1), log1);

  const int code0 = exit_code(node0, 90);
  const int code1 = exit_code(node1, 30);
  stop = true;
  for (auto& t : openers) t.join();
  for (int fd : idle) close(fd);
  INFO("node 0:\n" << slurp(log0) << "\nnode 1:\n" << slurp(log1));
  CHECK(idle.size() >= 30);
  CHECK(code0 == 0);
  CHECK(code1 == 0);
  std::remove(log0.c_str());
  std::remove(log1.c_str());
}
