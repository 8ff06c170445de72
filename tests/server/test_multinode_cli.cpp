// The multi-node flags on the real `octet` binary: serve, generate, perplexity and both benches
// accept --nnodes, --node-rank, --master-addr and --master-port (and their config-file keys),
// and a bad combination is a one-line usage error with exit code 2 before any model loads.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
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

TEST_CASE("multi-node CLI: nnodes > 1 on the CPU is a start-up usage error on every command",
          "[cli]") {
  const std::string flags = " --model " + kModel + " --nnodes 2 --tensor-parallel-size 2";
  struct Case {
    std::string command, extra, name;
  };
  for (const Case& c : {Case{"serve", "", "octet serve"},
                        Case{"generate", " --prompt hi --device cpu", "octet generate"},
                        Case{"perplexity", " --text /dev/null", "octet perplexity"},
                        Case{"bench latency", " --device cpu", "octet bench latency"},
                        Case{"bench engine", "", "octet bench engine"}}) {
    INFO(c.command);
    const RunResult r = run(c.command + flags + c.extra);
    CHECK(r.exit_code == 2);
    const std::string device = c.extra.find("--device cpu") != std::string::npos ? "cpu" : "auto";
    CHECK(r.output == c.name + ": multi-node needs --device cuda: --nnodes 2 with --device '" +
                          device + "'\n");
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
  const RunResult r = run("serve --config " + path);
  CHECK(r.exit_code == 2);
  CHECK(r.output == "octet serve: multi-node needs --device cuda: --nnodes 3 with --device 'auto'\n");
  // With --device cuda the flags validate, and the run goes on to fail on the model (or the
  // missing CUDA backend), not on a usage error.
  const RunResult r2 = run("serve --config " + path + " --device cuda");
  CHECK(r2.exit_code == 1);
  CHECK(r2.output.find("/nonexistent/model.gguf") != std::string::npos);
  CHECK(r2.output.find("multi-node") == std::string::npos);
  CHECK(r2.output.find("--node-rank") == std::string::npos);
  std::remove(path.c_str());
}
