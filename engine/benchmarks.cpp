#include "engine/benchmarks.h"

#include "kernels/kernel_bench.h"

namespace octet {

std::string kernel_benchmark_table(int64_t m_max) { return run_kernel_benchmark(m_max); }

double read_bandwidth_gbs() { return measure_read_bandwidth_gbs(); }

}  // namespace octet
