// The CPU thread count in the start-up log of the real binary: taskset to one core, a fake
// 1-CPU cgroup quota (OCTET_CGROUP_ROOT), and --threads.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

std::string run(const std::string& prefix, const std::string& args, int* exit_code) {
  const std::string cmd = prefix + std::string(OCTET_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

const std::string kGenerate = "generate --model " + std::string(OCTET_TEST_MODELS_DIR) +
                              "/stories260K.gguf --prompt-ids 1,2,3 --max-tokens 2 "
                              "--temperature 0";

}  // namespace

TEST_CASE("taskset to one core logs threads: 1", "[cli][threads]") {
  if (std::system("taskset -c 0 true >/dev/null 2>&1") != 0) {
    std::printf("SKIPPED: taskset is not available\n");
    std::exit(77);
  }
  int rc = -1;
  const std::string out = run("taskset -c 0 ", kGenerate, &rc);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("threads: 1 (affinity 1 CPUs") != std::string::npos);
}

TEST_CASE("a 1-CPU cgroup quota logs threads: 1", "[cli][threads]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("octet_cli_cgroup_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cpu.max") << "100000 100000\n";
  int rc = -1;
  const std::string out = run("OCTET_CGROUP_ROOT=" + dir.string() + " ", kGenerate, &rc);
  std::filesystem::remove_all(dir);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("threads: 1 (affinity ") != std::string::npos);
  CHECK(out.find(" CPUs, cgroup quota 1.0)") != std::string::npos);
}

TEST_CASE("threads: --threads overrides and is named in the log", "[cli][threads]") {
  int rc = -1;
  const std::string out = run("", kGenerate + " --threads 3", &rc);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("threads: 3 (--threads 3; affinity ") != std::string::npos);
  const std::string bad = run("", kGenerate + " --threads -1", &rc);
  CHECK(rc == 2);
  CHECK(bad.find("--threads") != std::string::npos);
}
