#pragma once
// ModelRunner: turns a SchedulerOutput into a ForwardBatch (token ids, positions, KV slots,
// block tables, which rows need logits), runs the model over the paged KV cache and hands back
// the logits rows each request needs (DESIGN.md "One request's path").
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/scheduler_output.h"
#include "models/forward_batch.h"
#include "models/llama.h"
#include "models/paged_kv_cache.h"

namespace octet {

class KVCacheManager;

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

/// Owns the model's backend (shared with the model), the preallocated activations and the
/// persistent batch buffers; each step uploads the ForwardBatch and downloads the logits rows.
class ModelRunner {
 public:
  /// Preallocates activations for max_num_batched_tokens tokens and max_num_seqs logits rows
  /// (0: sized by the first batches; a larger batch grows them, never shrinks).
  ModelRunner(const LlamaModel& model, PagedKVCache& cache, int64_t max_num_batched_tokens = 0,
              int64_t max_num_seqs = 0);

  /// Builds the batch for `out` (block ids from `kv`) and runs the forward pass. A request is
  /// sampled when its scheduled tokens reach its last token; prompt-logprob rows are added for
  /// requests that asked for them.
  StepLogits execute(const SchedulerOutput& out, const KVCacheManager& kv);

  /// The batch execute() would run (for tests).
  ForwardBatch build_batch(const SchedulerOutput& out, const KVCacheManager& kv,
                           StepLogits& rows) const;

 private:
  const LlamaModel& model_;
  PagedKVCache& cache_;
  std::shared_ptr<Backend> backend_;
  LlamaActivations act_;
  ForwardBatchBuffers device_batch_;
};

}  // namespace octet
