#pragma once
// Decode benchmark of paged_attention (kernels/cpu/paged_attention.h): one query token per
// sequence over long cached contexts, the case where attention streams the whole KV cache.
#include <cstdint>
#include <string>

#include "kernels/cpu/paged_attention.h"

namespace octet {

struct PagedAttentionBenchResult {
  double seconds_per_call = 0;   // one paged_attention call (all sequences, all heads)
  // Process CPU time per call, all threads together: on a shared machine, where other processes
  // take the cores now and then, this shows what the kernel itself costs.
  double cpu_seconds_per_call = 0;
  double kv_gb_per_s = 0;        // K and V bytes read per call / seconds_per_call, 1e9 B/s
  int64_t kv_bytes_per_call = 0;  // num_seqs * context_len * num_kv_heads * head_dim * 2 * bytes
};

/// Times paged_attention for num_seqs sequences of context_len cached tokens, one query each
/// (decode), with the current OpenMP thread count. The cache holds enough copies of the batch
/// (>= 256 MiB in all) that the calls, which rotate through them, read K/V from DRAM rather than
/// the caches; blocks are shuffled within each copy. Best mean over 3 runs of `iters` calls.
/// Throws std::invalid_argument on non-positive sizes or num_heads % num_kv_heads != 0.
PagedAttentionBenchResult bench_paged_attention_decode(DType dtype, int64_t context_len,
                                                       int64_t num_seqs, int64_t num_heads,
                                                       int64_t num_kv_heads, int64_t head_dim,
                                                       int64_t block_size, int iters);

/// A printable table for SmolLM2-135M's attention shape (9 query heads, 3 KV heads, head_dim
/// 64, block_size 16, one layer): contexts 512, 2K, 8K; bf16 and fp8_e4m3; 1 and 2 threads;
/// 1 and 8 sequences. Takes some seconds.
std::string run_paged_attention_benchmark();

}  // namespace octet
