// The default CPU thread count (kernels/cpu/cpu_threads.h) from fake cgroup files: cgroup v2
// cpu.max and v1 cfs quota/period, rounded up, at least 1, never above the affinity mask.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/cpu/cpu_threads.h"

using octet::cpu::detect_cpu_threads;
using octet::cpu::parse_cpu_max;

namespace {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  return CPU_COUNT(&set);
}

// A fresh directory standing in for /sys/fs/cgroup, removed at scope exit.
struct FakeRoot {
  std::filesystem::path dir;
  FakeRoot() {
    dir = std::filesystem::temp_directory_path() /
          ("octet_cgroup_" + std::to_string(getpid()) + "_" + std::to_string(rand()));
    std::filesystem::create_directories(dir);
  }
  ~FakeRoot() { std::filesystem::remove_all(dir); }
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel) << text << "\n";
  }
};

}  // namespace

TEST_CASE("parse_cpu_max reads quota / period", "[cpu_threads]") {
  CHECK(parse_cpu_max("max 100000") == 0.0);
  CHECK(parse_cpu_max("100000 100000") == 1.0);
  CHECK(parse_cpu_max("150000 100000") == 1.5);
  CHECK(parse_cpu_max("50000 100000") == 0.5);
  CHECK(parse_cpu_max("") == 0.0);
  CHECK(parse_cpu_max("abc 100000") == 0.0);
  CHECK(parse_cpu_max("100000 0") == 0.0);
}

TEST_CASE("no cgroup files: the affinity mask decides", "[cpu_threads]") {
  FakeRoot root;
  const auto c = detect_cpu_threads(root.dir.string());
  CHECK(c.threads == affinity_cpus());
  CHECK(c.quota == 0.0);
  CHECK(c.reason == "affinity " + std::to_string(affinity_cpus()) + " CPUs, no cgroup quota");
}

TEST_CASE("a cgroup v2 quota of 1 CPU gives 1 thread", "[cpu_threads]") {
  FakeRoot root;
  root.write("cpu.max", "100000 100000");
  const auto c = detect_cpu_threads(root.dir.string());
  CHECK(c.threads == 1);
  CHECK(c.quota == 1.0);
  CHECK(c.reason == "affinity " + std::to_string(affinity_cpus()) + " CPUs, cgroup quota 1.0");
}

TEST_CASE("a fractional quota rounds up, at least 1", "[cpu_threads]") {
  FakeRoot root;
  root.write("cpu.max", "50000 100000");  // 0.5 CPU -> 1 thread
  CHECK(detect_cpu_threads(root.dir.string()).threads == 1);
  FakeRoot root2;
  root2.write("cpu.max", "150000 100000");  // 1.5 CPUs -> 2 threads, unless fewer CPUs
  CHECK(detect_cpu_threads(root2.dir.string()).threads == std::min(2, affinity_cpus()));
}

TEST_CASE("a quota above the affinity mask does not add threads", "[cpu_threads]") {
  FakeRoot root;
  root.write("cpu.max", "6400000 100000");  // 64 CPUs
  const auto c = detect_cpu_threads(root.dir.string());
  CHECK(c.threads == affinity_cpus());
  CHECK(c.quota == 64.0);
}

TEST_CASE("cgroup v1 cfs quota and period are read", "[cpu_threads]") {
  FakeRoot root;
  root.write("cpu,cpuacct/cpu.cfs_quota_us", "100000");
  root.write("cpu,cpuacct/cpu.cfs_period_us", "100000");
  CHECK(detect_cpu_threads(root.dir.string()).threads == 1);
  FakeRoot unlimited;
  unlimited.write("cpu/cpu.cfs_quota_us", "-1");
  unlimited.write("cpu/cpu.cfs_period_us", "100000");
  CHECK(detect_cpu_threads(unlimited.dir.string()).threads == affinity_cpus());
}

TEST_CASE("OCTET_CGROUP_ROOT stands in for /sys/fs/cgroup", "[cpu_threads]") {
  FakeRoot root;
  root.write("cpu.max", "100000 100000");
  setenv("OCTET_CGROUP_ROOT", root.dir.c_str(), 1);
  const auto c = detect_cpu_threads();
  unsetenv("OCTET_CGROUP_ROOT");
  CHECK(c.threads == 1);
}

TEST_CASE("the start-up log line names the count and why", "[cpu_threads]") {
  octet::cpu::CpuThreadCount d;
  d.threads = 2;
  d.reason = "affinity 2 CPUs, cgroup quota 2.0";
  CHECK(octet::cpu::threads_log_line(2, 0, d) == "threads: 2 (affinity 2 CPUs, cgroup quota 2.0)");
  CHECK(octet::cpu::threads_log_line(3, 3, d) ==
        "threads: 3 (--threads 3; affinity 2 CPUs, cgroup quota 2.0)");
}
