// Plain, non-owning views of the tensors the kernels read and write. Every pointer is memory of
// the backend that runs the op (host memory for the CPU, device memory for CUDA); views carry no
// ownership and no device. Layouts are row-major.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"

namespace octet {

/// A 2-D tensor data: [rows, cols] of `dtype`, row-major, contiguous.
struct TensorRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
};

/// How an FP8 weight's codes lie in memory (WeightRef::layout, Backend::upload_fp8_weight).
///   RowMajor: [n, k], as checkpoints store them.
///   Rows8x32: the CPU AVX2 kernel's stream, so that a decode GEMV reads one sequential run of
///             bytes (kernels/cpu/w8a8.h pack_fp8_rows8x32 gives the byte order).
enum class Fp8Layout : uint8_t { RowMajor, Rows8x32 };

/// How a BF16 weight's values lie in memory (WeightRef::bf16_layout, Backend::upload_bf16_weight).
///   RowMajor: [n, k].
///   Rows8x8: the CPU AVX2 GEMV's stream: blocks of 8 rows (zero rows pad the last), each 8
///            consecutive values of the 8 rows side by side, then the k % 8 tails
///            (kernels/cpu/linear_bf16.h pack_bf16_rows8x8 gives the order).
enum class Bf16Layout : uint8_t { RowMajor, Rows8x8 };

/// A linear layer's weight: [n, k] ([out, in], PyTorch nn.Linear layout) of `dtype` (F32, BF16 or
/// FP8_E4M3), with, for FP8, scale [n] (PerRow) or [1] (PerTensor) FP32; bias [n] FP32 or null.
/// y[m, n] = sum_k x[m, k] * w[n, k] (* s_a[m] * s_w[n] for FP8) + bias[n].
struct WeightRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t n = 0;  // out features
  int64_t k = 0;  // in features
  const float* scale = nullptr;
  ScaleGranularity granularity = ScaleGranularity::PerRow;
  const float* bias = nullptr;
  /// FP8 only: the k-sum is split in k_groups equal consecutive parts (k % k_groups == 0), each
  /// summed from zero, the part sums then added in order. Row-parallel layers use the model's
  /// tensor-parallel group count at every TP size, so TP changes no bit (models/tensor_parallel.h).
  /// A backend whose exact_k_parts() is false (CUDA) sums all of k at once instead.
  int64_t k_groups = 1;
  Fp8Layout layout = Fp8Layout::RowMajor;  // FP8 only
  Bf16Layout bf16_layout = Bf16Layout::RowMajor;  // BF16 only
};

/// Whether ws[0..count) can run as one GEMM of their stacked rows (vLLM's QKVParallelLinear /
/// MergedColumnParallelLinear): at least two FP8 E4M3 weights, row-major, per-row scales, one k
/// part, the same k, and all or none with a bias. Where they sit in memory is not asked.
inline bool fp8_mergeable(const WeightRef* ws, int count) {
  if (count < 2) return false;
  for (int i = 0; i < count; ++i) {
    const WeightRef& w = ws[i];
    if (w.dtype != DType::FP8_E4M3 || w.layout != Fp8Layout::RowMajor ||
        w.granularity != ScaleGranularity::PerRow || w.k_groups != 1 || w.k != ws[0].k ||
        (w.bias == nullptr) != (ws[0].bias == nullptr) || w.n <= 0)
      return false;
  }
  return true;
}

/// fp8_mergeable, and each weight's codes, scales and bias start where the previous one's end
/// (one [sum n, k] weight, [sum n] scales and biases: models/linear.h upload_linears_merged).
inline bool fp8_adjacent(const WeightRef* ws, int count) {
  if (!fp8_mergeable(ws, count)) return false;
  for (int i = 1; i < count; ++i) {
    const WeightRef& a = ws[i - 1];
    const WeightRef& b = ws[i];
    if (static_cast<const uint8_t*>(b.data) != static_cast<const uint8_t*>(a.data) + a.n * a.k ||
        b.scale != a.scale + a.n || (a.bias != nullptr && b.bias != a.bias + a.n))
      return false;
  }
  return true;
}

/// An E4M3 weight matrix: data [n, k] ([out, in]) in `layout`, scale [n] (PerRow) or [1];
/// k_groups as WeightRef's.
struct Fp8WeightView {
  const uint8_t* data = nullptr;
  const float* scale = nullptr;
  ScaleGranularity granularity = ScaleGranularity::PerRow;
  int64_t n = 0;  // out features
  int64_t k = 0;  // in features
  int64_t k_groups = 1;
  Fp8Layout layout = Fp8Layout::RowMajor;
};

/// One layer's paged cache.
///   k, v:     [num_blocks, block_size, num_kv_heads, head_dim] elements of `dtype` (BF16, F16,
///             FP8_E4M3 or FP8_E5M2; F32 for calibration runs)
///   k_scale, v_scale: [num_kv_heads] FP32 (a per-tensor scale is repeated per head); read only
///             for FP8 dtypes, may be null otherwise.
/// Slot s is block s / block_size, offset s % block_size.
struct KVCacheView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::BF16;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  /// Dynamic per-(token, KV head) FP8 scales (--kv-cache-dtype fp8_per_token_head), null
  /// otherwise. When set, dtype is FP8_E4M3 and k_scale / v_scale are not read: slot s, KV head h
  /// holds its own scale k_token_scale[s * num_kv_heads + h] ([num_blocks, block_size,
  /// num_kv_heads] FP32, beside the blocks' values), written by write_kv_cache as
  /// amax(|row|) / 448 of that token's K (likewise V) head row (1.0 for an all-zero row).
  float* k_token_scale = nullptr;
  float* v_token_scale = nullptr;
};

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
  /// Optional host memory holding the same values as query_start_loc and seq_lens (the batch
  /// the caller built on the host). A backend that plans attention on the host (CUDA) reads
  /// these instead of copying the device arrays back, so the call queues work without
  /// waiting for the device (what a CUDA graph capture needs). Null: the device arrays only.
  const int64_t* host_query_start_loc = nullptr;
  const int64_t* host_seq_lens = nullptr;
  /// Optional host copy of block_tables (CUDA's FlashInfer decode lists each row's pages on the
  /// host; without it the backend runs its own kernels, which read the device table).
  const int32_t* host_block_tables = nullptr;
};

}  // namespace octet
