#pragma once
// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) for the Llama recipe: how one rank's
// share of the weights is cut from the host tensors before upload. Pure host functions on plain
// arrays; no Backend, no LinearWeight. Weights are [out, in] row-major (nn.Linear).
//
//   column-parallel (output rows split):  q_proj, k_proj, v_proj by heads; gate_proj, up_proj by
//       intermediate rows. Input replicated, output sharded; no communication. Per-row weight
//       scales and biases are split with their rows; a per-tensor scale is replicated.
//   row-parallel (input columns split):   o_proj by heads, down_proj by intermediate columns.
//       Input sharded (the column-parallel output), output partial: all-reduced after it
//       (all_reduce_sum on the CPU; BF16 on CUDA, below).
//       Scales (per output row or per tensor) are replicated. The bias stays on rank 0 only,
//       so the all-reduce adds it exactly once (y = (p_0 + b) + p_1 + ... + p_{N-1}); the recipe
//       needs no extra op.
//   vocab-parallel lm_head (output rows split): rank r holds vocab rows [vocab_begin,
//       vocab_end) padded with zero rows to vocab_shard_size = ceil(vocab / N) (the last
//       shard is the short one, a trailing rank may hold only padding); logits of every rank,
//       [rows, vocab_shard_size], are all_gathered and assemble_vocab_parallel_logits drops
//       the padding to rebuild [rows, vocab].
//   replicated: embeddings, norms, RoPE tables. The KV cache of rank r holds its kv heads only;
//       every rank uses the same block tables and slot mapping.
//
// GGUF's Q/K row permutation (adjacent-pair RoPE) is within each head, so head slices stay valid.
//
// FP8 activations of a row-parallel layer (o_proj, down_proj) with dynamic per-token scales:
// rank r holds columns cols_r of the input row x[i, :], but the scale must be the unsharded
// one, s_a[i] = max(amax(x[i, :]) / 448, 1 / (448 * 512)), or the FP8 codes (hence outputs)
// would change with the TP size (vLLM quantizes each shard on its own and does change them).
// So, per row-parallel FP8 linear, on every rank:
//     backend.row_amax(x_r, m, k_r, amax);              // amax[m], this rank's columns
//     comm.all_reduce_max(amax, m);                     // the whole row's |x| max (exact: max
//                                                       // is order-free, identical on ranks)
//     backend.quantize_fp8_dynamic(x_r, m, k_r, amax, qa, a_scale);   // global scale
//     backend.linear_w8a8(qa, a_scale, PerRow, m, w_r, y_partial);    // bias on rank 0 only
//     comm.all_reduce_sum(y_partial, m * n);
// Each code qa[i, j] then equals the unsharded code of that column, and a_scale[i] equals the
// unsharded scale bit for bit; TP changes only the order of the k-sum (partials summed in rank
// order). Column-parallel layers quantize their full, replicated input row locally: their codes
// never depended on TP. Static per-tensor input_scale: replicated, codes unchanged.
// The order of the k-sum is fixed too, for FP8 row-parallel layers: an ulp moved in a residual
// would flip a later layer's dynamic per-token code at a rounding boundary (measured before
// this: FP8 W8A8 logits of TP 3 vs 1 on SmolLM2 differed by up to 4.7, a greedy token at a
// near tie). So k is split in G = tensor_parallel_k_groups(config) equal parts at every TP size,
// each part summed from zero by the kernel, the G part sums added in part order, then the
// epilogue (linear_w8a8 with WeightRef::k_groups = G at TP 1). At TP N rank r holds parts
// [r * G / N, (r + 1) * G / N): linear_w8a8_partials, all_gather (rank-major = part order),
// linear_w8a8_combine. Same parts, same additions: TP changes no bit of an FP8 model's output
// (test_tensor_parallel_smollm2). The bias of an FP8 row-parallel layer is kept on every rank
// (combine adds it once). F32 and BF16 row-parallel layers all-reduce in rank order: their
// outputs move by ulps with TP (3.5e-5 on SmolLM2's FP32 logits), nothing downstream quantizes.
// All of the above is the CPU's (Backend::exact_k_parts() true): on the CPU, TP changes no bit
// of an FP8 model's output. CUDA (exact_k_parts() false) does what vLLM does instead: each rank
// quantizes its own columns with its own per-token scale, runs one GEMM over its k, rounds its
// partial output to BF16 and all-reduces it over NCCL in BF16 (ncclBfloat16, ncclSum), then
// widens the sum back to FP32; F32/BF16 layers likewise. Outputs then move with the TP size (the
// scales, the BF16 roundings and NCCL's reduction order all depend on it): no promise of bit-
// identical outputs across TP sizes on the GPU. The all-reduce carries m x hidden x 2 bytes per
// row-parallel linear per step, half FP32's (Llama-3.1-8B, hidden 4096: 8 KiB a token, 2 MiB at
// 256 tokens, 64 such all-reduces a step).
// Where the recipe applies it: models/linear.h linear_forward_row_parallel.
#include <cstdint>
#include <vector>

#include "models/model_config.h"

namespace octet {

/// One rank's share of the model. Head and row ranges are global indices, [begin, end).
struct TensorParallelShard {
  int rank = 0;
  int world_size = 1;
  int64_t head_dim = 0;
  int64_t num_heads = 0;          // query heads on this rank: num_attention_heads / world
  int64_t head_begin = 0;         // first global query head
  int64_t num_kv_heads = 0;       // KV heads in this rank's cache and k/v shards
  int64_t kv_head_begin = 0;      // first global KV head
  int64_t kv_head_replicas = 1;   // ranks holding each KV head (> 1 when world > KV heads)
  int64_t intermediate_size = 0;  // MLP rows on this rank: intermediate_size / world
  int64_t intermediate_begin = 0;
  int64_t vocab_begin = 0;        // real lm_head rows [vocab_begin, vocab_end)
  int64_t vocab_end = 0;
  int64_t vocab_shard_size = 0;   // ceil(vocab / world): lm_head shard rows with padding

  int64_t q_dim() const { return num_heads * head_dim; }      // q_proj rows, o_proj columns
  int64_t kv_dim() const { return num_kv_heads * head_dim; }  // k/v_proj rows
  int64_t q_row_begin() const { return head_begin * head_dim; }
  int64_t kv_row_begin() const { return kv_head_begin * head_dim; }
};

/// Checks that `config` can be split over tensor_parallel_size ranks, vLLM's rule:
/// num_attention_heads % N == 0; num_key_value_heads % N == 0, or N > num_key_value_heads and
/// N % num_key_value_heads == 0 (each KV head then replicated on N / num_key_value_heads ranks);
/// and intermediate_size % N == 0. Throws std::invalid_argument naming the size and the counts,
/// e.g. "tensor_parallel_size 2 does not divide num_attention_heads 9 (num_key_value_heads 3)".
void validate_tensor_parallel(const ModelConfig& config, int tensor_parallel_size);

/// The k-part count G of FP8 row-parallel sums (see above): the least common multiple of every
/// valid tensor_parallel_size in [1, 64] (validate_tensor_parallel's rule), so G / N is whole
/// for every N the model can take. It divides num_attention_heads and intermediate_size.
/// SmolLM2-135M: 3; stories260K: 4; Llama-3.1-8B: 32.
int64_t tensor_parallel_k_groups(const ModelConfig& config);

/// Rank `rank`'s shard of `config` (validated as above; throws the same errors). Query heads
/// [rank * H/N, ...); KV heads [rank * KV/N, ...), or, replicated, the one KV head
/// rank / (N / KV) (the group of the rank's query heads). Aborts (OCTET_CHECK) unless
/// 0 <= rank < tensor_parallel_size.
TensorParallelShard make_tensor_parallel_shard(const ModelConfig& config,
                                               int tensor_parallel_size, int rank);

/// A linear layer's host tensors, viewed: weight [out, in] of T (float, uint16_t bf16 bits or
/// uint8_t E4M3), scale [num_scales] with num_scales = out (per row), 1 (per tensor) or 0 (no
/// scale), bias [out] or null.
template <class T>
struct HostLinearView {
  const T* weight = nullptr;
  int64_t out_features = 0;
  int64_t in_features = 0;
  const float* scale = nullptr;
  int64_t num_scales = 0;
  const float* bias = nullptr;
};

/// A shard, owning its copies; scale and bias empty when the source had none.
template <class T>
struct HostLinearShard {
  std::vector<T> weight;  // [out_features, in_features]
  int64_t out_features = 0;
  int64_t in_features = 0;
  std::vector<float> scale;  // [out_features], [1] or empty
  std::vector<float> bias;   // [out_features] or empty
};

/// Column-parallel: output rows [row_begin, row_end) of w, with their per-row scales and
/// biases; a per-tensor scale is copied. Then pads with zero rows (scale 1, bias 0) up to
/// padded_rows when padded_rows > row_end - row_begin (the vocab-parallel lm_head; 0 = none).
/// Aborts (OCTET_CHECK) on a range outside [0, out_features] or a bad num_scales.
template <class T>
HostLinearShard<T> shard_column_parallel(const HostLinearView<T>& w, int64_t row_begin,
                                         int64_t row_end, int64_t padded_rows = 0);

/// Row-parallel: input columns [col_begin, col_end) of w; scales copied whole (they belong to
/// output rows or the tensor); bias kept only when keep_bias (pass rank == 0). Aborts on a
/// range outside [0, in_features].
template <class T>
HostLinearShard<T> shard_row_parallel(const HostLinearView<T>& w, int64_t col_begin,
                                      int64_t col_end, bool keep_bias);

/// The common cuts of a Llama layer for `shard` (thin wrappers over the two above).
template <class T>
HostLinearShard<T> shard_q_proj(const HostLinearView<T>& w, const TensorParallelShard& shard);
template <class T>  // k_proj and v_proj
HostLinearShard<T> shard_kv_proj(const HostLinearView<T>& w, const TensorParallelShard& shard);
template <class T>
HostLinearShard<T> shard_o_proj(const HostLinearView<T>& w, const TensorParallelShard& shard);
template <class T>  // gate_proj and up_proj
HostLinearShard<T> shard_gate_up_proj(const HostLinearView<T>& w,
                                      const TensorParallelShard& shard);
template <class T>
HostLinearShard<T> shard_down_proj(const HostLinearView<T>& w, const TensorParallelShard& shard);
/// lm_head rows [vocab_begin, vocab_end) padded to vocab_shard_size rows.
template <class T>
HostLinearShard<T> shard_lm_head(const HostLinearView<T>& w, const TensorParallelShard& shard);

/// Rebuilds logits [rows, vocab_size] from all_gather's output `gathered`
/// [world_size, rows, vocab_shard_size] (rank-major, each rank's padded shard), dropping the
/// padding columns: out[i, v] = gathered[r][i][v - r * vocab_shard_size], r = v / shard size.
void assemble_vocab_parallel_logits(const float* gathered, int world_size, int64_t rows,
                                    int64_t vocab_size, int64_t vocab_shard_size, float* out);

}  // namespace octet
