#include "engine/model_runner.h"

#include <algorithm>

#include "engine/kv_cache_manager.h"
#include "engine/model_loader.h"
#include "engine/request.h"

namespace octet {

ForwardBatch ModelRunner::build_batch(const SchedulerOutput& out, const KVCacheManager& kv,
                                      StepLogits& rows) const {
  ForwardBatch b;
  const int64_t bs = ranks_.at(0).cache->block_size();
  const size_t n_req = out.scheduled.size();
  rows.sample_row.assign(n_req, -1);
  rows.prompt_row_begin.assign(n_req, -1);
  rows.prompt_pos_begin.assign(n_req, 0);
  rows.prompt_row_count.assign(n_req, 0);
  int64_t max_blocks = 0;
  for (size_t i = 0; i < n_req; ++i) {
    const Request& r = *out.scheduled[i];
    const int64_t end = r.num_computed_tokens + out.num_scheduled_tokens[i];
    max_blocks = std::max(max_blocks, (end + bs - 1) / bs);
  }
  b.max_blocks_per_seq = max_blocks;
  b.block_tables.assign(static_cast<size_t>(n_req * max_blocks), 0);
  b.query_start_loc.push_back(0);
  for (size_t i = 0; i < n_req; ++i) {
    const Request& r = *out.scheduled[i];
    const std::vector<int32_t>& blocks = kv.get_block_ids(r.request_id);
    const int64_t begin = r.num_computed_tokens, n = out.num_scheduled_tokens[i],
                  end = begin + n, row0 = b.num_tokens();
    for (int64_t p = begin; p < end; ++p) {
      b.token_ids.push_back(r.token(p));
      b.positions.push_back(p);
      b.slot_mapping.push_back(static_cast<int64_t>(blocks.at(p / bs)) * bs + p % bs);
    }
    const int64_t nb = (end + bs - 1) / bs;
    std::copy_n(blocks.begin(), nb, b.block_tables.begin() + i * max_blocks);
    b.seq_lens.push_back(end);
    b.query_start_loc.push_back(b.num_tokens());
    // Prompt logprobs: the row at prompt position p predicts prompt token p + 1.
    const int64_t n_prompt = static_cast<int64_t>(r.prompt_token_ids.size());
    if (r.sampling_params.prompt_logprobs >= 0 && begin < n_prompt - 1) {
      const int64_t last = std::min(end, n_prompt - 1);  // exclusive
      rows.prompt_row_begin[i] = static_cast<int64_t>(b.logits_indices.size());
      rows.prompt_pos_begin[i] = begin;
      rows.prompt_row_count[i] = last - begin;
      for (int64_t p = begin; p < last; ++p) b.logits_indices.push_back(row0 + (p - begin));
    }
    if (end == r.num_tokens()) {
      rows.sample_row[i] = static_cast<int64_t>(b.logits_indices.size());
      b.logits_indices.push_back(row0 + n - 1);
    }
  }
  return b;
}

ModelRunner::ModelRunner(const LlamaModel& model, PagedKVCache& cache,
                         int64_t max_num_batched_tokens, int64_t max_num_seqs) {
  ranks_.resize(1);
  ranks_[0].model = &model;
  ranks_[0].cache = &cache;
  if (max_num_batched_tokens > 0)
    ranks_[0].act =
        model.new_activations(max_num_batched_tokens, std::max<int64_t>(max_num_seqs, 1));
}

ModelRunner::ModelRunner(const LoadedModel& loaded, int64_t num_blocks, int64_t block_size,
                         const std::vector<KVLayerSpec>& layers, int64_t max_num_batched_tokens,
                         int64_t max_num_seqs) {
  const int world = loaded.world_size();
  ranks_.resize(static_cast<size_t>(world));
  if (world > 1) group_ = loaded.ranks;
  const auto setup = [&](int r) {
    Rank& k = ranks_[r];
    k.model = &loaded.rank_model(r);
    const TensorParallelShard& s = k.model->shard();
    k.owned_cache = std::make_unique<PagedKVCache>(
        k.model->backend(), num_blocks, block_size, s.num_kv_heads, k.model->config().head_dim,
        world == 1 ? layers : shard_kv_layer_specs(layers, s.kv_head_begin, s.num_kv_heads));
    k.cache = k.owned_cache.get();
    if (max_num_batched_tokens > 0)
      k.act = k.model->new_activations(max_num_batched_tokens,
                                       std::max<int64_t>(max_num_seqs, 1));
  };
  if (world == 1) {
    setup(0);
  } else {
    group_->run([&](int r, Communicator&) { setup(r); });  // each rank allocates its own
  }
}

ModelRunner::~ModelRunner() = default;

StepLogits ModelRunner::execute(const SchedulerOutput& out, const KVCacheManager& kv) {
  StepLogits rows;
  rows.vocab = ranks_[0].model->config().vocab_size;
  const ForwardBatch batch = build_batch(out, kv, rows);
  const int64_t n = batch.num_tokens();
  const int64_t num_rows = static_cast<int64_t>(batch.logits_indices.size());
  rows.logits.resize(static_cast<size_t>(num_rows * rows.vocab));
  // Every rank: the same host batch on its own backend, weights, cache and activations.
  const auto run_rank = [&](int r, Communicator& comm) {
    Rank& k = ranks_[r];
    if (n > k.act.max_tokens || num_rows > k.act.max_logit_rows)
      k.act = k.model->new_activations(std::max(n, k.act.max_tokens),
                                       std::max(num_rows, k.act.max_logit_rows));
    k.device_batch.upload(k.model->backend(), batch);
    k.model->forward(batch, k.device_batch, *k.cache, k.act, comm);
    if (r == 0) k.model->read_logits(k.act, num_rows, rows.logits.data());
  };
  if (ranks_.size() == 1) {
    run_rank(0, single_rank_communicator());
  } else {
    group_->run(run_rank);
  }
  return rows;
}

}  // namespace octet
