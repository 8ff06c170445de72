// LlamaModel::forward over the paged KV cache: run_decoder (llama.cpp) with K/V written to
// blocks in each layer's dtype and attention read back from the blocks
// (Backend::paged_attention). Every op is per token or per
// (token, head), and the linear kernels are row-invariant, so a sequence's results do not
// depend on what else is in the batch.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "models/llama.h"

namespace octet {

namespace {

void check_batch(const ForwardBatch& b, const ModelConfig& c, const TensorParallelShard& shard,
                 const PagedKVCache& cache) {
  const int64_t n = b.num_tokens(), s = b.num_seqs();
  if (n <= 0 || s <= 0) throw std::invalid_argument("forward: empty batch");
  if (b.num_kv_groups != cache.layout().num_groups())
    throw std::invalid_argument("forward: the batch has " + std::to_string(b.num_kv_groups) +
                                " KV cache groups, the cache " +
                                std::to_string(cache.layout().num_groups()));
  if (static_cast<int64_t>(b.positions.size()) != n ||
      static_cast<int64_t>(b.slot_mapping.size()) != b.num_kv_groups * n ||
      static_cast<int64_t>(b.query_start_loc.size()) != s + 1 || b.query_start_loc[0] != 0 ||
      b.query_start_loc[s] != n ||
      static_cast<int64_t>(b.block_tables.size()) != b.num_kv_groups * s * b.max_blocks_per_seq)
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
  if (cache.num_kv_heads() != shard.num_kv_heads)
    throw std::invalid_argument("forward: the KV cache holds " +
                                std::to_string(cache.num_kv_heads()) + " KV heads, this rank " +
                                std::to_string(shard.num_kv_heads));
  if (cache.num_layers() != c.num_hidden_layers)
    throw std::invalid_argument("forward: the KV cache has " +
                                std::to_string(cache.num_layers()) + " layers, the model " +
                                std::to_string(c.num_hidden_layers));
}

}  // namespace

void LlamaModel::forward(const ForwardBatch& batch, const ForwardBatchBuffers& device,
                         PagedKVCache& cache, LlamaActivations& act, Communicator& comm) const {
  check_batch(batch, config_, shard_, cache);
  const int64_t n = batch.num_tokens(), rows = static_cast<int64_t>(batch.logits_indices.size());
  if (n > act.max_tokens || rows > act.max_logit_rows)
    throw std::invalid_argument("forward: " + std::to_string(n) + " tokens and " +
                                std::to_string(rows) + " logits rows exceed the activations (" +
                                std::to_string(act.max_tokens) + ", " +
                                std::to_string(act.max_logit_rows) + ")");
  PagedAttentionBatch attn_batch;
  attn_batch.num_seqs = batch.num_seqs();
  attn_batch.query_start_loc = device.query_start_loc.as<const int64_t>();
  attn_batch.seq_lens = device.seq_lens.as<const int64_t>();
  attn_batch.block_tables = device.block_tables.as<const int32_t>();
  attn_batch.max_blocks_per_seq = batch.max_blocks_per_seq;
  attn_batch.host_query_start_loc = batch.query_start_loc.data();  // the same values, host
  attn_batch.host_seq_lens = batch.seq_lens.data();
  attn_batch.host_block_tables = batch.block_tables.data();
  run_decoder(device, n, rows, attn_batch, cache, act, comm);
}

std::vector<float> LlamaModel::forward(const ForwardBatch& batch, PagedKVCache& cache) const {
  LlamaActivations act;
  ForwardBatchBuffers device;
  return forward(batch, cache, act, device);
}

std::vector<float> LlamaModel::forward(const ForwardBatch& batch, PagedKVCache& cache,
                                       LlamaActivations& act, ForwardBatchBuffers& device,
                                       Communicator& comm) const {
  check_batch(batch, config_, shard_, cache);
  const int64_t n = batch.num_tokens(), rows = static_cast<int64_t>(batch.logits_indices.size());
  if (n > act.max_tokens || rows > act.max_logit_rows)
    act = new_activations(std::max(n, act.max_tokens), std::max(rows, act.max_logit_rows));
  device.upload(*backend_, batch);
  forward(batch, device, cache, act, comm);
  if (comm.rank() != 0) return {};
  std::vector<float> logits(static_cast<size_t>(rows * config_.vocab_size));
  read_logits(act, rows, logits.data());
  return logits;
}

}  // namespace octet
