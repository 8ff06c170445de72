#include "kernels/cpu/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace octet::cpu {

namespace {

bool read_line(const std::string& path, std::string& line) {
  std::ifstream f(path);
  return f && std::getline(f, line);
}

// "/a/b" -> {"/a/b", "/a", ""}: the cgroup and its ancestors, relative to the mount.
std::vector<std::string> levels(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path != "/") {
    out.push_back(path);
    path = path.substr(0, path.find_last_of('/'));
  }
  out.push_back("");
  return out;
}

// The process's cgroup path for controller `want` ("" = the v2 unified hierarchy, "0::").
std::string own_cgroup(const std::string& want) {
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (want.empty() ? controllers.empty() : (("," + controllers + ",").find("," + want + ",") !=
                                              std::string::npos))
      return path;
  }
  return "";
}

void tighten(double& quota, double q) {
  if (q > 0 && (quota == 0 || q < quota)) quota = q;
}

double cgroup_quota(const std::string& root) {
  double quota = 0.0;
  std::string line;
  for (const std::string& level : levels(own_cgroup("")))
    if (read_line(root + level + "/cpu.max", line)) tighten(quota, parse_cpu_max(line));
  for (const char* dir : {"/cpu", "/cpu,cpuacct"}) {
    for (const std::string& level : levels(own_cgroup("cpu"))) {
      std::string q, p;
      if (!read_line(root + dir + level + "/cpu.cfs_quota_us", q) ||
          !read_line(root + dir + level + "/cpu.cfs_period_us", p))
        continue;
      const double qv = std::atof(q.c_str()), pv = std::atof(p.c_str());
      if (qv > 0 && pv > 0) tighten(quota, qv / pv);
    }
  }
  return quota;
}

}  // namespace

double parse_cpu_max(const std::string& line) {
  std::istringstream in(line);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0.0;
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  return end && *end == '\0' && q > 0 ? q / period : 0.0;
}

CpuThreadCount detect_cpu_threads(const std::string& cgroup_root) {
  std::string root = cgroup_root;
  if (root.empty()) {
    const char* env = std::getenv("OCTET_CGROUP_ROOT");
    root = env && *env ? env : "/sys/fs/cgroup";
  }
  CpuThreadCount c;
  cpu_set_t set;
  CPU_ZERO(&set);
  c.affinity = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  c.affinity = std::max(1, c.affinity);
  c.quota = cgroup_quota(root);
  c.threads = c.affinity;
  if (c.quota > 0) c.threads = std::min(c.threads, std::max(1, static_cast<int>(std::ceil(c.quota))));
  char buf[96];
  if (c.quota > 0)
    std::snprintf(buf, sizeof(buf), "affinity %d CPUs, cgroup quota %.1f", c.affinity, c.quota);
  else
    std::snprintf(buf, sizeof(buf), "affinity %d CPUs, no cgroup quota", c.affinity);
  c.reason = buf;
  return c;
}

std::string threads_log_line(int threads, int requested, const CpuThreadCount& detected) {
  return "threads: " + std::to_string(threads) + " (" +
         (requested > 0 ? "--threads " + std::to_string(requested) + "; " : std::string()) +
         detected.reason + ")";
}

}  // namespace octet::cpu
