// The multi-node flags on the real `octet` binary: serve, generate, perplexity and both benches
// accept --nnodes, --node-rank, --master-addr and --master-port (and their config-file keys),
// and a bad combination is a one-line usage error with exit code 2 before any model loads. A
// well-formed --nnodes > 1 is refused the same way, before the rendezvous (which would listen
// on --master-port for 300 s) and before the model opens: the engine has no cross-node
// broadcast of each step yet, so the other nodes would wait forever.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

RunResult run(const std::string& args) {
  const std::string cmd = std::string(OCTET_BINARY) + " " + args + " 2>&1";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A model path that does not exist: validation must fail before anything opens it.
const std::string kModel = "/nonexistent/model.gguf";

}  // namespace

// The one-line refusal of --nnodes N > 1 (config/multinode_config.h), written out.
std::string refusal(const std::string& command, int nnodes) {
  return command + ": --nnodes " + std::to_string(nnodes) +
         ": multi-node is not supported yet (the engine has no per-step broadcast of the "
         "scheduled batch to the ranks on other nodes, which would wait forever); single-node "
         "tensor parallelism over NCCL works: --nnodes 1 --device cuda --tensor-parallel-size N\n";
}

TEST_CASE("multi-node CLI: nnodes > 1 is a start-up usage error on every command and device",
          "[cli]") {
  const std::string flags = " --model " + kModel + " --nnodes 2 --tensor-parallel-size 2";
  struct Case {
    std::string command, extra, name;
  };
  for (const std::string device : {"", " --device cpu", " --device cuda", " --device cuda:0"})
    for (const Case& c : {Case{"serve", "", "octet serve"},
                          Case{"generate", " --prompt hi", "octet generate"},
                          Case{"perplexity", " --text /dev/null", "octet perplexity"},
                          Case{"bench latency", "", "octet bench latency"},
                          Case{"bench engine", "", "octet bench engine"}}) {
      INFO(c.command << device);
      const RunResult r = run(c.command + flags + c.extra + device);
      CHECK(r.exit_code == 2);
      CHECK(r.output == refusal(c.name, 2));
    }
}

TEST_CASE("multi-node CLI: node 1 fails at once instead of waiting for node 0", "[cli]") {
  // No node 0 listens on this port: before the refusal, node 1 retried here for 300 s.
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run("generate --model " + kModel + " --prompt hi --device cuda --nnodes 2 "
                          "--node-rank 1 --tensor-parallel-size 2 --master-port 1");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.exit_code == 2);
  CHECK(r.output == refusal("octet generate", 2));
  CHECK(seconds < 60.0);  // not a speed goal: a hang guard far below the 300 s rendezvous wait
}

TEST_CASE("multi-node CLI: each flag's range error names the flag", "[cli]") {
  const std::string base = "generate --model " + kModel + " --prompt hi";
  RunResult r = run(base + " --node-rank 1");
  CHECK(r.exit_code == 2);
  CHECK(r.output == "octet generate: --node-rank must be in [0, --nnodes 1), got 1\n");
  r = run(base + " --master-port 70000");
  CHECK(r.exit_code == 2);
  CHECK(r.output == "octet generate: --master-port must be in [1, 65535], got 70000\n");
  r = run(base + " --master-addr ''");
  CHECK(r.exit_code == 2);
  CHECK(r.output == "octet generate: --master-addr must be a host name or IP address, got ''\n");
  r = run(base + " --nnodes 0");
  CHECK(r.exit_code == 2);
  CHECK(r.output == "octet generate: --nnodes must be in [1, 64], got 0\n");
}

TEST_CASE("multi-node CLI: serve reads the keys from a config file too", "[cli]") {
  const std::string path = "test_multinode_cli.yaml";
  {
    std::ofstream f(path);
    f << "model: " << kModel << "\nnnodes: 3\ntensor_parallel_size: 3\nnode_rank: 2\n"
      << "master_addr: 10.1.2.3\nmaster_port: 1234\n";
  }
  const RunResult r = run("serve --config " + path);
  CHECK(r.exit_code == 2);
  CHECK(r.output == refusal("octet serve", 3));
  // The keys are read: node_rank 2 of nnodes 2 is a range error naming --node-rank.
  const RunResult r2 = run("serve --config " + path + " --device cuda --nnodes 2 "
                           "--tensor-parallel-size 2");
  CHECK(r2.exit_code == 2);
  CHECK(r2.output == "octet serve: --node-rank must be in [0, --nnodes 2), got 2\n");
  // With --nnodes 1 (and node_rank 0) on the command line the run goes on to fail on the
  // model, not on a usage error.
  const RunResult r3 = run("serve --config " + path + " --nnodes 1 --node-rank 0 "
                           "--tensor-parallel-size 1 --device cpu");
  CHECK(r3.exit_code == 1);
  CHECK(r3.output.find("/nonexistent/model.gguf") != std::string::npos);
  CHECK(r3.output.find("multi-node") == std::string::npos);
  std::remove(path.c_str());
}
