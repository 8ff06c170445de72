// The CPU thread count in the start-up log of the real binary: taskset to one core, a fake
// 1-CPU cgroup quota (OCTET_CGROUP_ROOT), and --threads.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"

namespace {

using octet::testing::RunResult;
using octet::testing::run_octet;

const std::string kGenerate = "generate --model " + std::string(OCTET_TEST_MODELS_DIR) +
                              "/stories260K.gguf --prompt-ids 1,2,3 --max-tokens 2 "
                              "--temperature 0";

}  // namespace

TEST_CASE("taskset to one core logs threads: 1", "[cli][threads]") {
  if (std::system("taskset -c 0 true >/dev/null 2>&1") != 0) {
    std::printf("SKIPPED: taskset is not available\n");
    std::exit(77);
  }
  const RunResult r = run_octet(kGenerate, "taskset -c 0 ");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("threads: 1 (affinity 1 CPUs") != std::string::npos);
}

TEST_CASE("a 1-CPU cgroup quota logs threads: 1", "[cli][threads]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("octet_cli_cgroup_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cpu.max") << "100000 100000\n";
  const RunResult r = run_octet(kGenerate, "OCTET_CGROUP_ROOT=" + dir.string() + " ");
  std::filesystem::remove_all(dir);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("threads: 1 (affinity ") != std::string::npos);
  CHECK(r.output.find(" CPUs, cgroup quota 1.0)") != std::string::npos);
}

TEST_CASE("threads: --threads overrides and is named in the log", "[cli][threads]") {
  const RunResult r = run_octet(kGenerate + " --threads 3");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("threads: 3 (--threads 3; affinity ") != std::string::npos);
  const RunResult bad = run_octet(kGenerate + " --threads -1");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--threads") != std::string::npos);
}
