#include "models/tensor_parallel.h"

#include <numeric>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common/check.h"

namespace octet {

namespace {

std::string counts(const ModelConfig& c) {
  return "num_attention_heads " + std::to_string(c.num_attention_heads) +
         ", num_key_value_heads " + std::to_string(c.num_key_value_heads);
}

[[noreturn]] void fail(int n, const std::string& what) {
  throw std::invalid_argument("tensor_parallel_size " + std::to_string(n) + " " + what);
}

}  // namespace

void validate_tensor_parallel(const ModelConfig& c, int n) {
  if (n < 1) fail(n, "must be at least 1");
  const int64_t heads = c.num_attention_heads;
  const int64_t kv = c.num_key_value_heads;
  if (heads % n != 0)
    fail(n, "does not divide num_attention_heads " + std::to_string(heads) +
                " (num_key_value_heads " + std::to_string(kv) + ")");
  if (n <= kv && kv % n != 0)
    fail(n, "does not divide num_key_value_heads " + std::to_string(kv) +
                " (num_attention_heads " + std::to_string(heads) + ")");
  if (n > kv && n % kv != 0)
    fail(n, "is larger than num_key_value_heads " + std::to_string(kv) +
                " and not a multiple of it, so KV heads cannot be replicated (" + counts(c) +
                ")");
  if (c.intermediate_size % n != 0)
    fail(n, "does not divide intermediate_size " + std::to_string(c.intermediate_size));
}

int64_t tensor_parallel_k_groups(const ModelConfig& c) {
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads;
  int64_t groups = 1;
  for (int64_t n = 2; n <= 64; ++n) {
    const bool kv_ok = n <= kv ? kv % n == 0 : n % kv == 0;
    if (heads % n == 0 && kv_ok && c.intermediate_size % n == 0)
      groups = std::lcm(groups, n);
  }
  return groups;
}

TensorParallelShard make_tensor_parallel_shard(const ModelConfig& c, int n, int rank) {
  validate_tensor_parallel(c, n);
  OCTET_CHECK(rank >= 0 && rank < n, "rank ", rank, " of tensor_parallel_size ", n);
  TensorParallelShard s;
  s.rank = rank;
  s.world_size = n;
  s.head_dim = c.head_dim;
  s.num_heads = c.num_attention_heads / n;
  s.head_begin = rank * s.num_heads;
  if (n <= c.num_key_value_heads) {
    s.num_kv_heads = c.num_key_value_heads / n;
    s.kv_head_begin = rank * s.num_kv_heads;
  } else {
    // vLLM's QKVParallelLinear: one KV head per rank, each on N / KV consecutive ranks; the
    // rank's query heads all belong to that head's GQA group (H/N divides H/KV).
    s.kv_head_replicas = n / c.num_key_value_heads;
    s.num_kv_heads = 1;
    s.kv_head_begin = rank / s.kv_head_replicas;
  }
  s.intermediate_size = c.intermediate_size / n;
  s.intermediate_begin = rank * s.intermediate_size;
  s.vocab_shard_size = (c.vocab_size + n - 1) / n;
  s.vocab_begin = std::min(c.vocab_size, rank * s.vocab_shard_size);
  s.vocab_end = std::min(c.vocab_size, s.vocab_begin + s.vocab_shard_size);
  return s;
}

namespace {

template <class T>
void check_view(const HostLinearView<T>& w) {
  OCTET_CHECK(w.out_features >= 0 && w.in_features >= 0, "shape [", w.out_features, ", ",
              w.in_features, "]");
  OCTET_CHECK(w.weight != nullptr || w.out_features * w.in_features == 0, "null weight");
  OCTET_CHECK(w.num_scales == 0 || w.num_scales == 1 || w.num_scales == w.out_features,
              "num_scales ", w.num_scales, " for ", w.out_features, " output rows");
  OCTET_CHECK(w.num_scales == 0 || w.scale != nullptr, "null scale");
}

}  // namespace

template <class T>
HostLinearShard<T> shard_column_parallel(const HostLinearView<T>& w, int64_t row_begin,
                                         int64_t row_end, int64_t padded_rows) {
  check_view(w);
  OCTET_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.out_features, "rows [",
              row_begin, ", ", row_end, ") of ", w.out_features);
  const int64_t rows = row_end - row_begin;
  const int64_t out_rows = std::max(rows, padded_rows);
  const int64_t k = w.in_features;
  HostLinearShard<T> s;
  s.out_features = out_rows;
  s.in_features = k;
  s.weight.assign(out_rows * k, T{});  // padding rows: zeros (0.0f, bf16 +0, E4M3 +0)
  std::copy(w.weight + row_begin * k, w.weight + row_end * k, s.weight.begin());
  if (w.num_scales == 1 && w.out_features != 1) {
    s.scale.assign(1, w.scale[0]);  // per tensor: replicated
  } else if (w.num_scales > 0) {
    s.scale.assign(out_rows, 1.0f);  // a finite scale for the padding rows
    std::copy(w.scale + row_begin, w.scale + row_end, s.scale.begin());
  }
  if (w.bias) {
    s.bias.assign(out_rows, 0.0f);
    std::copy(w.bias + row_begin, w.bias + row_end, s.bias.begin());
  }
  return s;
}

template <class T>
HostLinearShard<T> shard_row_parallel(const HostLinearView<T>& w, int64_t col_begin,
                                      int64_t col_end, bool keep_bias) {
  check_view(w);
  OCTET_CHECK(0 <= col_begin && col_begin <= col_end && col_end <= w.in_features, "columns [",
              col_begin, ", ", col_end, ") of ", w.in_features);
  const int64_t cols = col_end - col_begin;
  HostLinearShard<T> s;
  s.out_features = w.out_features;
  s.in_features = cols;
  s.weight.resize(w.out_features * cols);
  for (int64_t i = 0; i < w.out_features; ++i) {
    const T* src = w.weight + i * w.in_features + col_begin;
    std::copy(src, src + cols, s.weight.begin() + i * cols);
  }
  s.scale.assign(w.scale, w.scale + w.num_scales);
  if (w.bias && keep_bias) s.bias.assign(w.bias, w.bias + w.out_features);
  return s;
}

template <class T>
HostLinearShard<T> shard_q_proj(const HostLinearView<T>& w, const TensorParallelShard& s) {
  return shard_column_parallel(w, s.q_row_begin(), s.q_row_begin() + s.q_dim());
}

template <class T>
HostLinearShard<T> shard_kv_proj(const HostLinearView<T>& w, const TensorParallelShard& s) {
  return shard_column_parallel(w, s.kv_row_begin(), s.kv_row_begin() + s.kv_dim());
}

template <class T>
HostLinearShard<T> shard_o_proj(const HostLinearView<T>& w, const TensorParallelShard& s) {
  return shard_row_parallel(w, s.q_row_begin(), s.q_row_begin() + s.q_dim(), s.rank == 0);
}

template <class T>
HostLinearShard<T> shard_gate_up_proj(const HostLinearView<T>& w,
                                      const TensorParallelShard& s) {
  return shard_column_parallel(w, s.intermediate_begin,
                               s.intermediate_begin + s.intermediate_size);
}

template <class T>
HostLinearShard<T> shard_down_proj(const HostLinearView<T>& w, const TensorParallelShard& s) {
  return shard_row_parallel(w, s.intermediate_begin, s.intermediate_begin + s.intermediate_size,
                            s.rank == 0);
}

template <class T>
HostLinearShard<T> shard_lm_head(const HostLinearView<T>& w, const TensorParallelShard& s) {
  return shard_column_parallel(w, s.vocab_begin, s.vocab_end, s.vocab_shard_size);
}

void assemble_vocab_parallel_logits(const float* gathered, int world_size, int64_t rows,
                                    int64_t vocab_size, int64_t vocab_shard_size, float* out) {
  OCTET_CHECK(world_size >= 1 && rows >= 0 && vocab_shard_size >= 0 &&
                  vocab_shard_size * world_size >= vocab_size,
              "vocab ", vocab_size, " in ", world_size, " shards of ", vocab_shard_size);
  for (int r = 0; r < world_size; ++r) {
    const int64_t begin = std::min(vocab_size, r * vocab_shard_size);
    const int64_t width = std::min(vocab_size, begin + vocab_shard_size) - begin;
    const float* shard = gathered + r * rows * vocab_shard_size;
    for (int64_t i = 0; i < rows; ++i)
      std::copy(shard + i * vocab_shard_size, shard + i * vocab_shard_size + width,
                out + i * vocab_size + begin);
  }
}

#define OCTET_TP_INSTANTIATE(T)                                                              \
  template HostLinearShard<T> shard_column_parallel(const HostLinearView<T>&, int64_t,       \
                                                    int64_t, int64_t);                       \
  template HostLinearShard<T> shard_row_parallel(const HostLinearView<T>&, int64_t, int64_t, \
                                                 bool);                                      \
  template HostLinearShard<T> shard_q_proj(const HostLinearView<T>&,                         \
                                           const TensorParallelShard&);                      \
  template HostLinearShard<T> shard_kv_proj(const HostLinearView<T>&,                        \
                                            const TensorParallelShard&);                     \
  template HostLinearShard<T> shard_o_proj(const HostLinearView<T>&,                         \
                                           const TensorParallelShard&);                      \
  template HostLinearShard<T> shard_gate_up_proj(const HostLinearView<T>&,                   \
                                                 const TensorParallelShard&);                \
  template HostLinearShard<T> shard_down_proj(const HostLinearView<T>&,                      \
                                              const TensorParallelShard&);                   \
  template HostLinearShard<T> shard_lm_head(const HostLinearView<T>&,                        \
                                            const TensorParallelShard&);

OCTET_TP_INSTANTIATE(float)
OCTET_TP_INSTANTIATE(uint16_t)
OCTET_TP_INSTANTIATE(uint8_t)

#undef OCTET_TP_INSTANTIATE

}  // namespace octet
