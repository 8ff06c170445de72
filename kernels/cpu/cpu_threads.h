#pragma once
// How many CPU worker threads this process should run: the CPUs it may be scheduled on
// (sched_getaffinity) capped by its cgroup CPU quota (cgroup v2 cpu.max, or v1
// cpu.cfs_quota_us / cpu.cfs_period_us), so that a container limited to 2 CPUs on a 64-core
// host runs 2 workers, not 64.
#include <string>

namespace octet::cpu {

struct CpuThreadCount {
  int threads = 1;     // >= 1
  int affinity = 1;    // CPUs in the affinity mask
  double quota = 0.0;  // cgroup CPU quota in CPUs (quota / period, tightest along the path); 0: none
  std::string reason;  // "affinity 2 CPUs, cgroup quota 2.0" / "affinity 2 CPUs, no cgroup quota"
};

/// The default thread count: min(affinity CPUs, ceil(quota)), at least 1. cgroup_root is where
/// the cgroup file systems are mounted (the v2 unified one at the root, v1 controllers in
/// cpu/ or cpu,cpuacct/); the process's own cgroup is found from /proc/self/cgroup and every
/// level from it up to the root is read. Empty cgroup_root: $OCTET_CGROUP_ROOT if set (tests
/// inject fake files), else /sys/fs/cgroup. Unreadable files count as no quota.
CpuThreadCount detect_cpu_threads(const std::string& cgroup_root = "");

/// The quota in CPUs from a cgroup v2 cpu.max line ("max 100000" -> 0, "150000 100000" -> 1.5);
/// 0 when unlimited or malformed.
double parse_cpu_max(const std::string& line);

/// The start-up log line: "threads: N (affinity A CPUs, cgroup quota Q)", with "--threads N; "
/// before the detected reason when requested > 0 overrides it.
std::string threads_log_line(int threads, int requested, const CpuThreadCount& detected);

}  // namespace octet::cpu
