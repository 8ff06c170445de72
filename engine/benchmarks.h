#pragma once
// Benchmark helpers the `octet bench` commands print (engine facade over kernels/).
#include <cstdint>
#include <string>

namespace octet {

/// The W8A8 vs FP32 kernel table for SmolLM2's linear shapes (kernels/kernel_bench.h).
std::string kernel_benchmark_table(int64_t m_max);

/// Measured memory read bandwidth, GB/s (256 MiB streamed by 2 threads, best of 10).
double read_bandwidth_gbs();

}  // namespace octet
