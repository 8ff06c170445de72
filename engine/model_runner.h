#pragma once
// ModelRunner: turns a SchedulerOutput into a ForwardBatch (token ids, positions, KV slots,
// block tables, which rows need logits), runs the model over the paged KV cache and hands back
// the logits rows each request needs (DESIGN.md "One request's path"). With tensor parallelism
// every rank (LoadedModel::ranks) runs the same host batch, uploaded to its own backend, over its
// own weight shard, KV cache (its KV heads; the same blocks and block tables for every rank) and
// activations; the logits come back whole from rank 0.
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/scheduler_output.h"
#include "kernels/rank_group.h"
#include "models/forward_batch.h"
#include "models/llama.h"
#include "models/paged_kv_cache.h"

namespace octet {

class KVCacheManager;
struct LoadedModel;

/// Logits rows of one step, per scheduled request (same order as SchedulerOutput::scheduled).
struct StepLogits {
  int64_t vocab = 0;
  std::vector<float> logits;            // [num_rows, vocab]
  std::vector<int64_t> sample_row;      // [num_scheduled]: row to sample from, or -1
  // Prompt logprobs: rows for prompt positions p (predicting token p + 1), per request.
  std::vector<int64_t> prompt_row_begin;  // [num_scheduled]: first row, or -1
  std::vector<int64_t> prompt_pos_begin;  // [num_scheduled]: position p of that first row
  std::vector<int64_t> prompt_row_count;  // [num_scheduled]
  const float* row(int64_t r) const { return logits.data() + r * vocab; }
};

/// Owns the per-rank activations and persistent batch buffers (and, built from a LoadedModel,
/// the per-rank KV caches); shares the model's backends and rank group. Each step uploads the
/// ForwardBatch to every rank and downloads the logits rows from rank 0.
class ModelRunner {
 public:
  /// One rank over `cache` (made by the caller on model.backend()). Preallocates activations for
  /// max_num_batched_tokens tokens and max_num_seqs logits rows (0: sized by the first batches;
  /// a larger batch grows them, never shrinks).
  ModelRunner(const LlamaModel& model, PagedKVCache& cache, int64_t max_num_batched_tokens = 0,
              int64_t max_num_seqs = 0);

  /// Every rank of `loaded` (world size 1 included), each with its own PagedKVCache of
  /// num_blocks blocks of block_size tokens holding its KV heads, `layers` sliced to them
  /// (shard_kv_layer_specs). Throws std::invalid_argument for bad cache sizes.
  ModelRunner(const LoadedModel& loaded, int64_t num_blocks, int64_t block_size,
              const std::vector<KVLayerSpec>& layers, int64_t max_num_batched_tokens,
              int64_t max_num_seqs);

  ~ModelRunner();

  /// Builds the batch for `out` (block ids from `kv`) and runs the forward pass. A request is
  /// sampled when its scheduled tokens reach its last token; prompt-logprob rows are added for
  /// requests that asked for them.
  StepLogits execute(const SchedulerOutput& out, const KVCacheManager& kv);

  /// The batch execute() would run (for tests).
  ForwardBatch build_batch(const SchedulerOutput& out, const KVCacheManager& kv,
                           StepLogits& rows) const;

  int world_size() const { return static_cast<int>(ranks_.size()); }
  /// Rank r's KV cache.
  const PagedKVCache& cache(int r) const { return *ranks_.at(r).cache; }

 private:
  struct Rank {
    const LlamaModel* model = nullptr;
    PagedKVCache* cache = nullptr;
    std::unique_ptr<PagedKVCache> owned_cache;
    LlamaActivations act;
    ForwardBatchBuffers device_batch;
  };
  std::vector<Rank> ranks_;
  std::shared_ptr<RankGroup> group_;  // null for one rank
};

}  // namespace octet
