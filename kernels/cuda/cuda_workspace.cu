// The CUDA backend's workspace sizing (cuda_backend.h "Workspace sizing"): plain arithmetic,
// no GPU needed, shared by CudaBackend's scratch and the engine's memory budget.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/flashinfer_prefill.h"

namespace octet {

namespace ck = octet::cuda_kernels;

int64_t cuda_gemm_scratch_floats(int64_t m, int64_t n, int64_t k, int64_t k_groups,
                                 bool has_fp8) {
  if (has_fp8) return 0;
  const int64_t kg = k / std::max<int64_t>(k_groups, 1);
  return ((n * kg + 7) / 8 * 8 + (m * kg + 7) / 8 * 8) / 2;
}

int64_t cuda_merged_scratch_floats(int64_t m, int64_t n) { return m * n; }

int64_t cuda_bf16_scratch_floats(int64_t m, int64_t k) { return (m * k + 7) / 8 * 4; }

int64_t cuda_gemm_chunk_rows(int64_t scratch_floats, int64_t m, int64_t n, int64_t k,
                             int64_t k_groups, bool has_fp8) {
  const auto fits = [&](int64_t r) {
    return cuda_gemm_scratch_floats(r, n, k, k_groups, has_fp8) <= scratch_floats;
  };
  if (m <= 0) return 0;
  if (fits(m)) return m;
  int64_t lo = 0, hi = m;  // fits(lo) or lo == 0; !fits(hi); the need grows with r
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

WorkspaceBytes cuda_workspace_bytes(const WorkspaceShape& s, bool has_fp8, bool flashinfer) {
  WorkspaceBytes b;
  const int64_t rows = std::min(
      kCudaGemmChunkRows,
      std::max({int64_t{1}, s.max_num_batched_tokens, s.max_num_seqs, s.max_graph_seqs}));
  int64_t floats = 0;
  for (const WorkspaceShape::Linear& l : s.fp8_linears)
    floats = std::max(floats, l.bf16    ? cuda_bf16_scratch_floats(rows, l.k)
                              : l.merged ? (has_fp8 ? cuda_merged_scratch_floats(rows, l.n) : 0)
                                         : cuda_gemm_scratch_floats(rows, l.n, l.k, 1, has_fp8));
  b.gemm_scratch = floats * int64_t{sizeof(float)};
  const ck::AttentionWorkspace a =
      ck::attention_workspace(s.max_num_batched_tokens, s.max_num_seqs, s.max_model_len,
                              s.block_size, s.num_heads, s.head_dim, s.max_graph_seqs);
  b.attention_partials = a.partial_floats * int64_t{sizeof(float)};
  b.attention_plan = a.plan_bytes;
  // octet's own prefill kernel (other GPUs, other head dims) needs none.
  if (flashinfer && ck::flashinfer_prefill_supported(DType::BF16, s.head_dim))
    b.attention_prefill = a.prefill_bytes;
  return b;
}

}  // namespace octet
