#pragma once
// Kernel benchmark behind `octet bench kernels`: FP32 linear (cpu::linear) against W8A8
// (quantize_per_token_e4m3 + linear_w8a8) on the linear shapes of SmolLM2-135M, with a measured
// memory read bandwidth as the floor a memory-bound GEMV can reach.
#include <cstdint>
#include <string>

namespace octet {

/// Runs the benchmark and returns a printable table (takes a few seconds). For m = 1 (decode) it
/// reports GB/s of weight bytes read (weights cycle through copies totalling >= 256 MiB, so they
/// come from DRAM, not the caches), for m = m_max (prefill, m_max >= 2) GFLOP/s (2 m n k per
/// call); then the FP8 / FP32 speedup, the per-token time of all of SmolLM2's linears, and the
/// read bandwidth of a 256 MiB buffer streamed by 2 threads.
std::string run_kernel_benchmark(int64_t m_max);

/// Memory read bandwidth, GB/s: a 256 MiB buffer summed by 2 threads, best of 10 (the floor a
/// memory-bound decode step is measured against).
double measure_read_bandwidth_gbs();

}  // namespace octet
