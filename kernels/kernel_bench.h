#pragma once
// The CPU kernel benchmark behind `octet bench kernels` (defined in kernels/cpu/w8a8_bench.cpp):
// FP32 linear, BF16 and W8A8 on the linear shapes of SmolLM2-135M at decode (m = 1),
// batched-decode (m = 4, 16, 64) and prefill batch sizes, with a measured memory read
// bandwidth as the floor a memory-bound GEMV can reach. Declared here so that engine/ reaches
// it without including kernels/cpu.
#include <cstdint>
#include <string>

namespace octet {

/// Runs the benchmark and returns a printable table (takes ~20 seconds). Per shape and batch size
/// m in {1, 4, 16, 64, m_max} (m_max >= 2; sizes >= m_max left out): FP32 (cpu::linear), BF16
/// (linear_bf16) and FP8 W8A8 (quantize_per_token_e4m3 + linear_w8a8; on AVX-512 CPUs also the
/// AVX2 path) times, FP8 tokens/s and time relative to m = 1. Batches below m_max cycle their
/// weights through copies totalling >= 256 MiB, so they come from DRAM as in a decode step
/// (GB/s of FP8 weight bytes), m_max reuses one copy (GFLOP/s, 2 m n k per call). Then the
/// time of all SmolLM2 linears for one step of m tokens, and the read bandwidth of a 256 MiB
/// buffer streamed by 2 threads.
std::string run_kernel_benchmark(int64_t m_max);

/// Memory read bandwidth, GB/s: a 256 MiB buffer summed by 2 threads, best of 10 (the floor a
/// memory-bound decode step is measured against).
double measure_read_bandwidth_gbs();

}  // namespace octet
