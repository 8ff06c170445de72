// The kernels CudaBackend (cuda_backend_ops.cu, cuda_backend_linear.cu) queues for one Backend
// call, op by op: the launch model that kernels/launch_counter.h tallies while another backend
// runs the ops (the CPU rehearsal of `octet bench latency --device cuda`'s kernels per decode
// step), and that the GPU test test_cuda_launch_count checks against the kernel nodes of a
// captured decode graph.
// Plain C++17 without CUDA types. Assumes an sm_89+ GPU (FP8 tensor cores) on which cuBLASLt
// has a batch-invariant algorithm for every shape lt_refusal accepts (gemm_policy.h), operands
// 16-byte aligned. Memory copies (attention plan uploads) are not kernels and not counted.
// Keep it in step with those files: a change of dispatch there changes a count here.
#pragma once

#include <cstdint>

#include "kernels/cuda/gemm_policy.h"

namespace octet::cuda_kernels {

/// Whether cuBLASLt takes an (inputs, n, k) GEMM of packed rows (ld = k), aligned operands.
inline bool lt_takes(GemmInput type, int64_t n, int64_t k) {
  GemmCall c;
  c.type = type;
  c.m = 1;
  c.n = n;
  c.k = k;
  c.ld = k;
  return lt_refusal(c, /*has_fp8=*/true) == LtRefusal::None;
}

/// linear (weights of `type`, F32 or BF16; FP32 activations): where cuBLASLt takes the shape,
/// its GEMM (BF16: after converting the activations to BF16) and the bias add; else the one
/// simt_gemm kernel.
inline int64_t launches_linear(GemmInput type, int64_t n, int64_t k, bool bias) {
  if (!lt_takes(type, n, k)) return 1;
  return (type == GemmInput::BF16 ? 2 : 1) + (bias ? 1 : 0);
}

/// linear_w8a8: one FP8 GEMM over all of k (k_groups ignored) and the scaling epilogue in
/// place, or the one simt_gemm kernel.
inline int64_t launches_linear_w8a8(int64_t n, int64_t k) {
  return lt_takes(GemmInput::E4M3, n, k) ? 2 : 1;
}

/// linear_w8a8_add_rms_norm: the GEMM and one row kernel (epilogue, residual add, RMSNorm,
/// quantization), or simt_gemm (its own epilogue) and the fused RMSNorm: 2 either way.
inline int64_t launches_linear_w8a8_add_rms_norm() { return 2; }

/// linear_w8a8_multi over merged projections (fp8_adjacent, at most 4, FP8 device) of n
/// stacked outputs: one GEMM and one epilogue writing each output; 0 when cuBLASLt refuses the
/// stacked shape (each weight then runs as linear_w8a8).
inline int64_t launches_linear_w8a8_merged(int64_t n, int64_t k) {
  return lt_takes(GemmInput::E4M3, n, k) ? 2 : 0;
}

/// linear_w8a8_partials: one GEMM per k part, or one simt_gemm kernel for all parts.
inline int64_t launches_linear_w8a8_partials(int64_t n, int64_t k, int64_t k_groups) {
  return k_groups >= 1 && lt_takes(GemmInput::E4M3, n, k / k_groups) ? k_groups : 1;
}

/// rope: one kernel for q and k.
inline int64_t launches_rope() { return 1; }

/// paged_attention of a decode step as a CUDA graph runs it (every sequence one query): the
/// split kernel and the merge kernel, which a graph always holds. Other calls, as eager ones
/// run in one chunk: the split kernel when some sequence has fewer than 8 queries
/// (kPrefillMinQueries), the merge kernel when one of their rows' visible positions (window:
/// the last `window`; 0: all) span two 512-position partitions, the tiled prefill kernel when
/// some sequence has 8 or more. query_start_loc [num_seqs + 1], seq_lens [num_seqs]: host.
inline int64_t launches_paged_attention(int64_t num_seqs, const int64_t* query_start_loc,
                                        const int64_t* seq_lens, int64_t window) {
  bool decode = false, merge = false, prefill = false, all_one = num_seqs > 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q = query_start_loc[s + 1] - query_start_loc[s];
    all_one = all_one && q == 1;
    if (q >= 8) {
      prefill = true;
      continue;
    }
    decode = decode || q > 0;
    for (int64_t pos = seq_lens[s] - q; pos < seq_lens[s]; ++pos) {
      const int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
      merge = merge || lo / 512 != pos / 512;
    }
  }
  if (all_one) return 2;
  return int64_t{decode} + int64_t{merge} + int64_t{prefill};
}

}  // namespace octet::cuda_kernels
