// The GEMMs of the CUDA backend: y[m, n] = act[m, k] . W[n, k]^T (row-major, W [out, in]) with
// FP32 accumulation, in two implementations (gemm.cu):
//  - LtGemm: cuBLASLt (FP8 E4M3 x E4M3, BF16 x BF16 or F32 x F32 in, FP32 out, compute 32F, FP8
//    without fast accumulation), one algorithm per (inputs, n, k), batch invariant (below);
//  - simt_gemm: a plain tiled CUDA-core kernel ("simt_gemm"), one FP32 FMA chain per output in
//    k order, for shapes cuBLASLt cannot take (k and ld multiples of 16 bytes of elements, n % 4,
//    16-byte aligned operands) and for BF16 weights with FP32 activations.
// The W8A8 scaling epilogue, the k-group part sums and the bias are shared with
// elementwise.h (w8a8_combine) through device_math.h, so every path applies the same epilogue.
//
// Batch invariance of LtGemm (a row's bits never depend on how many rows share the call; the
// host-side rules are in gemm_policy.h and tested without a GPU in test_gemm_policy.cpp):
//  - The algorithm is chosen once per (inputs, n, k), never per m, on packed rows (ld = k), so a
//    weight's k groups and a tensor-parallel shard of it (other ld) run the same kernel; the
//    descriptors are cached per (inputs, n, k, ld) (gemm_policy.h's key), each ld checked once.
//    The heuristic (cublasLtMatmulAlgoGetHeuristic) is asked for kLtCandidates candidates at m =
//    kLtHeuristicRows, and the one taken is the first whose configuration reads back
//    CUBLASLT_ALGO_CONFIG_SPLITK_NUM == 1 and CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME == NONE, needs
//    no workspace, and passes cublasLtMatmulAlgoCheck at every lt_probe_rows (1 ... max_rows).
//    The cuBLASLt algorithm descriptor fixes the kernel, tile, stages, split-K count and
//    reduction scheme (cublasLtMatmulAlgoConfigAttributes_t), so every m runs the same kernel.
//  - Constrained in the heuristic's preference: CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK =
//    CUBLASLT_REDUCTION_SCHEME_NONE ("dot-product shall be performed in one sequence",
//    cublasLtReductionScheme_t) and CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 0: split-K and
//    stream-K style decompositions, whose k split can follow the problem size and the SM count,
//    keep partial sums or tile counters in the workspace (the INPLACE, COMPUTE_TYPE and
//    OUTPUT_TYPE schemes), so with none every output tile's k loop runs whole in one CTA.
//    cublasLtMatmul is then called with no workspace, so no configuration can use one.
//  - Not set, on purpose: CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET (default: the device's SMs; it
//    only steers the heuristic, which runs once per key) and CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING /
//    CLUSTER_SHAPE_ID (they map tiles to CTAs, not the order of a tile's k loop).
//  - A key with no acceptable candidate runs on simt_gemm for every m (batch invariant by
//    construction), with one warning line starting "octet: warning: simt_gemm fallback"
//    (kSimtFallbackWarning); so does a refused shape (lt_refusal), once per key and reason.
//  - A call of more than max_rows rows runs as chunks of at most max_rows rows through the same
//    algorithm (rows are independent), so the probe at max_rows covers every m.
// tests/kernels/test_cuda_backend.cpp checks the bits on the GPU (m = 1, 2, 7, 16, 64, 300 and
// past max_rows, every GEMM path, eligible and refused shapes).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/gemm_policy.h"

namespace octet::cuda_kernels {

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

/// cuBLASLt GEMMs with FP32 output on one stream, one batch-invariant algorithm per (inputs, n, k)
/// and descriptors per (inputs, n, k, ld), cached (see the file comment). No workspace.
class LtGemm {
 public:
  /// max_rows: the most rows one cuBLASLt call gets (the algorithm is checked up to it; larger
  /// calls run in chunks of max_rows rows), > 0.
  LtGemm(cudaStream_t stream, int sm_major, int sm_minor, int64_t max_rows = kLtDefaultMaxRows);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  /// True when FP8 tensor-core GEMMs exist on this device (sm_89 and later).
  bool has_fp8() const { return has_fp8_; }

  /// d[i, j] = sum_t act[i * ld + t] * w[j * ld + t] over t < k, FP32 (d: [m, n], row stride
  /// n). Returns false (queuing nothing) when this call runs on simt_gemm instead: m <= 0, a
  /// shape cuBLASLt cannot take (lt_refusal: k or ld not a multiple of 16 bytes of elements,
  /// n % 4, an operand not 16-byte aligned, FP8 before sm_89), or a key without a
  /// batch-invariant algorithm. The answer depends only on (inputs, n, k, ld) and the operands'
  /// alignment, never on m; a row's bits do not depend on m, and every ld runs the same kernel.
  bool matmul(GemmInput type, const void* act, const void* w, int64_t m, int64_t n, int64_t k,
              int64_t ld, float* d);

  /// One line for the start-up log: the paths and "<usable>/<keys> cached ..." plans
  /// (test_cuda_backend.cpp reads the two counts).
  std::string describe() const;

 private:
  struct Plan;  // the algorithm and descriptors of one key (gemm.cu)
  struct Choice {  // the algorithm of one (type, n, k)
    bool ok = false;
    cublasLtMatmulAlgo_t algo{};
    std::string why;  // !ok: why none
  };
  std::unique_ptr<Plan> make_layouts(const LtGemmKey& key) const;
  void probe(Plan& p, const cublasLtMatmulAlgo_t& algo, LtCandidate& f) const;
  const Choice& algo_for(GemmInput type, int64_t n, int64_t k);
  std::unique_ptr<Plan> make_plan(const LtGemmKey& key);
  void warn_once(const LtGemmKey& key, int reason, const std::string& why);

  cudaStream_t stream_;
  bool has_fp8_ = false;
  int64_t max_rows_ = kLtDefaultMaxRows;
  cublasLtHandle_t handle_ = nullptr;
  std::map<std::tuple<int, int64_t, int64_t>, Choice> algos_;  // (type, n, k)
  LtPlanCache<Plan> plans_;                                      // (type, n, k, ld)
  std::map<LtGemmKey, uint32_t> warned_;  // reasons (bits) already warned about per key
};

}  // namespace octet::cuda_kernels
