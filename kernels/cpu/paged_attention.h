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

namespace octet {

/// Element type of one layer's KV cache.
enum class KVCacheDType : uint8_t { BF16, FP16, FP8_E4M3, FP8_E5M2 };

/// Bytes per element: 2 for BF16/FP16, 1 for FP8.
constexpr int64_t kv_cache_dtype_bytes(KVCacheDType d) {
  return d == KVCacheDType::BF16 || d == KVCacheDType::FP16 ? 2 : 1;
}
constexpr bool kv_cache_dtype_is_fp8(KVCacheDType d) {
  return d == KVCacheDType::FP8_E4M3 || d == KVCacheDType::FP8_E5M2;
}
/// "bf16", "fp16", "fp8_e4m3", "fp8_e5m2".
const char* kv_cache_dtype_name(KVCacheDType d);

/// One layer's paged cache.
///   k, v:     [num_blocks, block_size, num_kv_heads, head_dim] elements of `dtype`
///   k_scale, v_scale: [num_kv_heads] FP32 (a per-tensor scale is repeated per head); read only
///             for FP8 dtypes, may be null otherwise.
/// Slot s is block s / block_size, offset s % block_size.
struct KVCacheView {
  void* k = nullptr;
  void* v = nullptr;
  KVCacheDType dtype = KVCacheDType::BF16;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

/// Stores n tokens' K and V (k, v: [n, num_kv_heads, head_dim] FP32) in slots slot_mapping[i]
/// (a negative slot skips that token). BF16/FP16: round to nearest even (float_to_bf16 /
/// float_to_fp16 of half.h); FP8: fp8_e4m3_from_float / fp8_e5m2_from_float (fp8.h) of
/// x / scale[kv head], true division. Multithreaded over tokens.
void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t n);

/// The query tokens of a batch of sequences (a struct of arrays, ForwardBatch's layout).
///   query_start_loc: [num_seqs + 1]; sequence s owns query rows [query_start_loc[s],
///                    query_start_loc[s+1]) of q and out
///   seq_lens:        [num_seqs]; context length of sequence s after this step: its queries are
///                    the last positions seq_lens[s] - num_queries .. seq_lens[s] - 1, and the
///                    cache already holds K/V for positions 0 .. seq_lens[s] - 1 (the queries'
///                    own included, written by write_kv_cache before the call)
///   block_tables:    [num_seqs, max_blocks_per_seq]; position p of sequence s is in block
///                    block_tables[s * max_blocks_per_seq + p / block_size]
struct PagedAttentionBatch {
  int64_t num_seqs = 0;
  const int64_t* query_start_loc = nullptr;
  const int64_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t max_blocks_per_seq = 0;
};

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
