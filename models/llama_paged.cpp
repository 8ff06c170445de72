// LlamaModel::forward over the paged KV cache: the same recipe as the dense forward in
// llama.cpp (see llama.h), with K/V written to blocks in each layer's dtype and attention read
// back from the blocks (kernels/cpu/paged_attention.h). Every op is per token or per
// (token, head), and the linear kernels are row-invariant, so a sequence's results do not
// depend on what else is in the batch.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "models/llama.h"

namespace octet {

namespace {

void check_batch(const ForwardBatch& b, const ModelConfig& c, const PagedKVCache& cache) {
  const int64_t n = b.num_tokens(), s = b.num_seqs();
  if (n <= 0 || s <= 0) throw std::invalid_argument("forward: empty batch");
  if (static_cast<int64_t>(b.positions.size()) != n ||
      static_cast<int64_t>(b.slot_mapping.size()) != n ||
      static_cast<int64_t>(b.query_start_loc.size()) != s + 1 || b.query_start_loc[0] != 0 ||
      b.query_start_loc[s] != n ||
      static_cast<int64_t>(b.block_tables.size()) != s * b.max_blocks_per_seq)
    throw std::invalid_argument("forward: inconsistent ForwardBatch arrays");
  for (int64_t i = 0; i < n; ++i)
    if (b.token_ids[i] < 0 || b.token_ids[i] >= c.vocab_size)
      throw std::invalid_argument("token id " + std::to_string(b.token_ids[i]) +
                                  " is outside the vocabulary [0, " +
                                  std::to_string(c.vocab_size) + ")");
  for (int64_t q = 0; q < s; ++q)
    if (b.seq_lens[q] > b.max_blocks_per_seq * cache.block_size() ||
        b.query_start_loc[q + 1] - b.query_start_loc[q] > b.seq_lens[q])
      throw std::invalid_argument("forward: sequence " + std::to_string(q) +
                                  " does not fit its block table");
  for (int64_t r : b.logits_indices)
    if (r < 0 || r >= n) throw std::invalid_argument("forward: logits index out of range");
  if (cache.num_layers() != c.num_hidden_layers)
    throw std::invalid_argument("forward: the KV cache has " +
                                std::to_string(cache.num_layers()) + " layers, the model " +
                                std::to_string(c.num_hidden_layers));
}

}  // namespace

std::vector<float> LlamaModel::forward(const ForwardBatch& batch, PagedKVCache& cache) const {
  const ModelConfig& c = config_;
  check_batch(batch, c, cache);
  const int64_t n = batch.num_tokens(), h = c.hidden_size, hd = c.head_dim,
                nh = c.num_attention_heads, nkv = c.num_key_value_heads, q_dim = nh * hd,
                kv_dim = nkv * hd, ffn = c.intermediate_size;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  PagedAttentionBatch attn_batch;
  attn_batch.num_seqs = batch.num_seqs();
  attn_batch.query_start_loc = batch.query_start_loc.data();
  attn_batch.seq_lens = batch.seq_lens.data();
  attn_batch.block_tables = batch.block_tables.data();
  attn_batch.max_blocks_per_seq = batch.max_blocks_per_seq;
  LinearScratch scratch;

  // Activations: [n, width] row-major, one row per token.
  std::vector<float> x(n * h), xn(n * h), q(n * q_dim), k(n * kv_dim), v(n * kv_dim),
      attn(n * q_dim), proj(n * h), gate(n * ffn), up(n * ffn);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(weights_.embed_tokens.data() + static_cast<int64_t>(batch.token_ids[i]) * h, h,
                x.data() + i * h);

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LlamaLayerWeights& w = weights_.layers[layer];
    const KVCacheView kv = cache.layer(layer);

    cpu::rms_norm_rows(x.data(), w.attn_norm.data(), xn.data(), n, h, c.rms_norm_eps);
    linear_forward(w.q_proj, xn.data(), n, q.data(), scratch);
    linear_forward(w.k_proj, xn.data(), n, k.data(), scratch);
    linear_forward(w.v_proj, xn.data(), n, v.data(), scratch);
    cpu::rope_rows(q.data(), n, q_dim, nh, hd, c.rotary_dim, batch.positions.data(),
                   inv_freq_.data(), rope_layout_);
    cpu::rope_rows(k.data(), n, kv_dim, nkv, hd, c.rotary_dim, batch.positions.data(),
                   inv_freq_.data(), rope_layout_);
    write_kv_cache(kv, k.data(), v.data(), batch.slot_mapping.data(), n);
    paged_attention(kv, q.data(), attn_batch, nh, c.layer_sliding_window[layer], softmax_scale,
                    attn.data());
    linear_forward(w.o_proj, attn.data(), n, proj.data(), scratch);
    for (int64_t j = 0; j < n * h; ++j) x[j] += proj[j];

    cpu::rms_norm_rows(x.data(), w.ffn_norm.data(), xn.data(), n, h, c.rms_norm_eps);
    linear_forward(w.gate_proj, xn.data(), n, gate.data(), scratch);
    linear_forward(w.up_proj, xn.data(), n, up.data(), scratch);
#pragma omp parallel for schedule(static) if (n * ffn >= 32768)
    for (int64_t i = 0; i < n; ++i)  // per row: vector/tail split never depends on the batch
      cpu::silu_mul(gate.data() + i * ffn, up.data() + i * ffn, gate.data() + i * ffn, ffn);
    linear_forward(w.down_proj, gate.data(), n, proj.data(), scratch);
    for (int64_t j = 0; j < n * h; ++j) x[j] += proj[j];
  }

  const int64_t rows = static_cast<int64_t>(batch.logits_indices.size());
  std::vector<float> logits(rows * c.vocab_size);
  if (rows == 0) return logits;
  std::vector<float> last(rows * h);
  for (int64_t r = 0; r < rows; ++r)
    cpu::rms_norm(x.data() + batch.logits_indices[r] * h, weights_.norm.data(),
                  last.data() + r * h, h, c.rms_norm_eps);
  linear_forward(weights_.lm_head, last.data(), rows, logits.data(), scratch);
  return logits;
}

}  // namespace octet
