// LlamaModel::forward over the paged KV cache: run_decoder (llama.cpp) with K/V written to
// blocks in each layer's dtype and attention read back from the blocks
// (kernels/cpu/paged_attention.h). Every op is per token or per
// (token, head), and the linear kernels are row-invariant, so a sequence's results do not
// depend on what else is in the batch.
#include <cmath>
#include <stdexcept>
#include <string>

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
  const int64_t hd = c.head_dim;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  PagedAttentionBatch attn_batch;
  attn_batch.num_seqs = batch.num_seqs();
  attn_batch.query_start_loc = batch.query_start_loc.data();
  attn_batch.seq_lens = batch.seq_lens.data();
  attn_batch.block_tables = batch.block_tables.data();
  attn_batch.max_blocks_per_seq = batch.max_blocks_per_seq;
  // The whole batch's K/V of a layer are written before its attention reads them back, so a
  // token's K/V are the cached (possibly FP8) values whether computed now or earlier.
  const AttendFn attend = [&](int64_t layer, const float* q, const float* k, const float* v,
                              float* attn) {
    const KVCacheView kv = cache.layer(layer);
    write_kv_cache(kv, k, v, batch.slot_mapping.data(), batch.num_tokens());
    paged_attention(kv, q, attn_batch, c.num_attention_heads, c.layer_sliding_window[layer],
                    softmax_scale, attn);
  };
  return run_decoder(batch.token_ids.data(), batch.num_tokens(), batch.positions.data(), attend,
                     batch.logits_indices);
}

}  // namespace octet
