// The GEMMs of the CUDA backend: y[m, n] = act[m, k] . W[n, k]^T (row-major, W [out, in]) with
// FP32 accumulation, in two implementations (gemm.cu):
//  - LtGemm: cuBLASLt (FP8 E4M3 x E4M3, BF16 x BF16 or F32 x F32 in, FP32 out, compute 32F, FP8
//    without fast accumulation), the algorithm chosen by cuBLASLt's heuristic once per
//    (inputs, m bucket, n, k, ld) and cached, split-K reductions excluded (deterministic sums);
//  - simt_gemm: a plain tiled CUDA-core kernel ("simt_gemm"), one FP32 FMA chain per output in
//    k order, for shapes cuBLASLt cannot take (FP8 needs k and ld multiples of 16 and 16-byte
//    aligned operands) and for BF16 weights with FP32 activations.
// The W8A8 scaling epilogue, the k-group part sums and the bias are shared with
// elementwise.h (w8a8_combine) through device_math.h, so every path applies the same epilogue.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace octet::cuda_kernels {

/// Element types of the two operands.
enum class GemmInput : uint8_t { F32, BF16, E4M3 };

/// What simt_gemm writes.
enum class SimtOut : uint8_t {
  Plain,     // y = acc (+ bias)
  W8A8,      // y = w8a8_epilogue(sum of the k-group parts in order, a_scale, w_scale, bias)
  Partials,  // acc[g, i, j]: the part sum of group g (groups of k / k_groups inputs)
};

struct SimtGemmArgs {
  const void* act = nullptr;  // [m, k]: F32, or E4M3 codes
  bool act_e4m3 = false;
  const void* w = nullptr;  // [n, k]: F32, BF16 bits or E4M3 codes
  GemmInput w_type = GemmInput::F32;
  int64_t m = 0, n = 0, k = 0, k_groups = 1;
  SimtOut out_kind = SimtOut::Plain;
  float* y = nullptr;  // [m, n], or [k_groups, m, n] for Partials
  const float* bias = nullptr;
  const float* a_scale = nullptr;  // W8A8: [m] (a_per_row) or [1]
  bool a_per_row = false;
  const float* w_scale = nullptr;  // W8A8: [n] (w_per_row) or [1]
  bool w_per_row = false;
};

/// Queues the tiled CUDA-core GEMM. Each output's sum is one FMA chain over its inputs in
/// order (per k group), whatever m, n or the tile: batch invariant, deterministic.
void simt_gemm(const SimtGemmArgs& a, cudaStream_t stream);

/// cuBLASLt GEMMs with FP32 output on one stream, algorithm cache, and a 32 MiB workspace.
class LtGemm {
 public:
  LtGemm(cudaStream_t stream, int sm_major, int sm_minor);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  /// True when FP8 tensor-core GEMMs exist on this device (sm_89 and later).
  bool has_fp8() const { return has_fp8_; }

  /// d[i, j] = sum_t act[i * ld + t] * w[j * ld + t] over t < k, FP32 (d: [m, n], row stride
  /// n). Returns false (queuing nothing) when this shape cannot run on cuBLASLt: operands not
  /// 16-byte aligned, k or ld not a multiple of 16 (FP8) or 8 (BF16) or 4 (F32), or no algorithm
  /// from the heuristic or for this exact m. The answer depends only on (inputs, m, n, k, ld)
  /// and the operands' alignment, so two calls on the same operands take the same path and
  /// algorithm and give the same bits.
  bool matmul(GemmInput type, const void* act, const void* w, int64_t m, int64_t n, int64_t k,
              int64_t ld, float* d);

  /// One line for the start-up log: the paths and how many algorithms are cached.
  std::string describe() const;

 private:
  struct Algo {
    bool ok = false;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t>;  // type, m bucket, n, k, ld
  const Algo& algo_for(GemmInput type, int64_t m_bucket, int64_t n, int64_t k, int64_t ld);

  cudaStream_t stream_;
  bool has_fp8_ = false;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Algo> algos_;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t>, bool> exact_ok_;  // m exact
};

/// The m bucket of the algorithm cache: 16, 32, 64, ..., 4096, then multiples of 4096.
int64_t gemm_m_bucket(int64_t m);

}  // namespace octet::cuda_kernels
