// The multi-node flags on the real `octet` binary: serve, generate, perplexity and both benches
// accept --nnodes, --node-rank, --master-addr and --master-port (and their config-file keys),
// and a bad combination is a one-line usage error with exit code 2 before any model loads.
// serve and generate run multi-node (tests/server/test_multinode_serve.cpp); perplexity and
// the benches run on one node and refuse --nnodes > 1 the same way; the CPU runs one rank per
// node; a node other than 0 fails on a missing model at once instead of waiting for node 0.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <string>

#include "cli_run.h"

namespace {

using octet::testing::RunResult;

RunResult run(const std::string& args) { return octet::testing::run_octet(args); }

// A model path that does not exist: validation must fail before anything opens it.
const std::string kModel = "/nonexistent/model.gguf";

}  // namespace

// The one-line refusal of --nnodes N > 1 by a one-node command (config/multinode_config.h).
std::string refusal(const std::string& command, int nnodes) {
  return command + ": --nnodes " + std::to_string(nnodes) +
         ": this command runs on one node; multi-node tensor parallelism runs `octet serve` "
         "and `octet generate` (every node with the same flags and its --node-rank)\n";
}

TEST_CASE("multi-node CLI: perplexity and the benches refuse nnodes > 1 on every device",
          "[cli]") {
  const std::string flags = " --model " + kModel + " --nnodes 2 --tensor-parallel-size 2";
  struct Case {
    std::string command, extra, name;
  };
  for (const std::string device : {"", " --device cpu", " --device cuda", " --device cuda:0"})
    for (const Case& c : {Case{"perplexity", " --text /dev/null", "octet perplexity"},
                          Case{"bench latency", "", "octet bench latency"},
                          Case{"bench engine", "", "octet bench engine"}}) {
      INFO(c.command << device);
      const RunResult r = run(c.command + flags + c.extra + device);
      CHECK(r.exit_code == 2);
      CHECK(r.output == refusal(c.name, 2));
    }
}

TEST_CASE("multi-node CLI: the CPU runs one rank per node", "[cli]") {
  for (const std::string command : {"serve", "generate --prompt hi"}) {
    INFO(command);
    const RunResult r = run(command + " --model " + kModel + " --device cpu --nnodes 2 "
                            "--tensor-parallel-size 4");
    CHECK(r.exit_code == 2);
    CHECK(r.output == "octet " + command.substr(0, command.find(' ')) +
                          ": --device cpu with --nnodes 2 runs one rank per node: "
                          "--tensor-parallel-size must be 2, got 4\n");
  }
}

TEST_CASE("multi-node CLI: node 1 fails on a missing model at once instead of waiting for "
          "node 0", "[cli]") {
  // No node 0 listens on this port: node 1 would wait for it for 300 s.
  for (const std::string command : {"generate --prompt hi", "serve"}) {
    INFO(command);
    const auto t0 = std::chrono::steady_clock::now();
    const RunResult r = run(command + " --model " + kModel + " --device cpu --nnodes 2 "
                            "--node-rank 1 --tensor-parallel-size 2 --master-port 1");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("/nonexistent/model.gguf: no such file or directory") !=
          std::string::npos);
    CHECK(seconds < 60.0);  // not a speed goal: a hang guard far below the 300 s wait
  }
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
  // Node 2 of 3 follows node 0: it fails on the model before connecting.
  const RunResult r = run("serve --config " + path);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("/nonexistent/model.gguf: no such file or directory") !=
        std::string::npos);
  CHECK(r.output.find("node 2 of 3") != std::string::npos);
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
