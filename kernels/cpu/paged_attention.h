#pragma once
// Paged KV cache kernels on the CPU: writing K/V into blocks (quantizing to FP8 with per-KV-head
// scales) and causal grouped-query attention over a block table (vLLM's reshape_and_cache and
// paged attention; Kwon et al. 2023, "Efficient Memory Management for Large Language Model
// Serving with PagedAttention"). Kernels know pointers, shapes, dtypes and scales only.
//
// Numerics (DESIGN.md): FP8 q = fp8(x / scale[h]) with RNE and saturation to +-max (NaN stays
// NaN); dequantization x_hat = float(q) * scale[h] inline; BF16/FP16 round to nearest even and
// ignore the scales. Scores, softmax and the weighted sum of V are FP32.
// Batch invariance: the result for one (query token, head) depends only on that query and the
// cached K/V it attends to, never on the other sequences in the batch or the thread count
// (bitwise). It may differ in the last bits between CPUs with different vector units: the
// kernel is chosen at run time (AVX-512 VBMI, AVX2+FMA+F16C, or portable scalar code).
// Broken invariants (null pointers, shapes, out-of-range slots or block ids, missing or
// non-finite or non-positive FP8 scales) abort with a message.
#include <cstdint>

#include "kernels/common/views.h"

namespace octet {

/// Stores n tokens' K and V (k, v: [n, num_kv_heads, head_dim] FP32) in slots slot_mapping[i]
/// (a negative slot skips that token). BF16/FP16: round to nearest even (float_to_bf16 /
/// float_to_fp16 of half.h); FP8: fp8_e4m3_from_float / fp8_e5m2_from_float (fp8.h) of
/// x / scale[kv head], true division. Multithreaded over tokens.
void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t n);

/// Causal attention: q: [num_tokens, num_heads, head_dim] FP32 -> out: same shape.
/// num_heads must be a multiple of cache.num_kv_heads (GQA: query head h reads KV head
/// h / (num_heads / num_kv_heads)). sliding_window > 0: a query at position p attends to
/// positions max(0, p - sliding_window + 1) .. p (HF's sliding_window semantics: `window`
/// tokens, itself included); 0 = full causal attention. softmax_scale multiplies q.k
/// (1/sqrt(head_dim) for Llama). Multithreaded (OpenMP) over (token, KV head) pairs and, for
/// long contexts, fixed 256-position partitions of them (flash-decoding; the partial softmaxes
/// are folded in position order, so the split never changes the result). Inside an enclosing
/// parallel region it runs on the calling thread.
void paged_attention(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
                     int64_t num_heads, int64_t sliding_window, float softmax_scale, float* out);

namespace ref {
/// Plain reference of paged_attention: dequantizes each sequence's visible K/V into contiguous
/// FP32 arrays and calls ref::attention (kernels/cpu/ops_ref.h) per query token.
void paged_attention(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
                     int64_t num_heads, int64_t sliding_window, float softmax_scale, float* out);
}  // namespace ref

}  // namespace octet
