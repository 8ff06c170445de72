// The CUDA half of `octet bench kernels --device cuda` (kernel_figures.cu): cuBLASLt GEMM times
// through the production wrapper (gemm.h LtGemm::matmul), cuBLASLt's outer-vector FP8 scales
// against it, and the device-to-device copy bandwidth, all timed with CUDA events. Plain C++,
// so that kernels/kernel_figures.cpp reaches it without nvcc (as kernel_bench.h is reached
// from engine/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace octet::cuda_kernels {

/// One GEMM to time: d[m, n] = act[m, k] . w[n, k]^T (w [out, in], row-major), E4M3 x E4M3
/// (fp8 true) or BF16 x BF16 inputs, FP32 output, ld = k.
struct GemmTimingCase {
  bool fp8 = false;
  int64_t m = 0, n = 0, k = 0;
};

/// Its result. on_cublaslt false: LtGemm::matmul refused the shape (the backend would run the
/// SIMT fallback) and nothing was timed (median_ms 0).
struct GemmTiming {
  double median_ms = 0.0;  // median over `repeats` calls, each between two CUDA events
  bool on_cublaslt = false;
};

/// Times every case on GPU `device` (cudaSetDevice) through one LtGemm on a fresh stream:
/// 3 untimed calls (algorithm choice, clocks), then `repeats` calls back to back, each between
/// two events. Operands hold seeded values of magnitude [0.5, 1) with random signs. The weight
/// cycles through copies totalling >= 512 MiB (several times the H200's 50 MB L2), so m = 1
/// reads its weight from HBM as a decode step does. Throws std::runtime_error naming the call
/// on a CUDA error (cudaErrorMemoryAllocation included).
std::vector<GemmTiming> time_lt_gemms(int device, const std::vector<GemmTimingCase>& cases,
                                      int repeats);

/// cuBLASLt's outer-vector FP8 scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B:
/// d[i, j] = a_scale[i] w_scale[j] sum_t act[i, t] w[j, t], FP32 out) against octet's path
/// (LtGemm::matmul, then the w8a8_scale epilogue kernel), on the same E4M3 operands and scales.
struct OuterVecTiming {
  bool accepted = false;  // cuBLASLt offered an algorithm under LtGemm's preference and ran it
  std::string why;        // !accepted: the call that refused and its status
  double ms = 0.0;        // median of `repeats`: the outer-vector GEMM
  double plain_ms = 0.0;  // median of `repeats`: octet's GEMM plus its epilogue kernel
  double equal_fraction = 0.0;  // outputs whose bits equal octet's
  double max_rel_diff = 0.0;    // max |outer - octet| / |octet| over the outputs
};

/// Runs that comparison on GPU `device` for one m x n x k, after 3 untimed calls of each.
/// Operands as time_lt_gemms'; per-token and per-channel scales in [2^-8, 2^-7). Reports a
/// refusal in `why` (never throws for one); throws std::runtime_error on a CUDA error.
OuterVecTiming time_outer_vec_fp8(int device, int64_t m, int64_t n, int64_t k, int repeats);

/// Device-to-device copy bandwidth of GPU `device`, GB/s counting read and write (2 * bytes /
/// time): cudaMemcpyAsync device to device, the median of `repeats` copies of `bytes` (each
/// between two CUDA events) after one warm-up. Throws std::runtime_error on a CUDA error.
double d2d_copy_gbs(int device, int64_t bytes, int repeats);

}  // namespace octet::cuda_kernels
