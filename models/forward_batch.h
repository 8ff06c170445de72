#pragma once
// ForwardBatch: what one engine step runs through the model, as a struct of arrays (vLLM's
// attention metadata; STYLE.md 5). Built by the engine's model runner from SchedulerOutput.
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace octet {

struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [num_tokens], sequences back to back
  std::vector<int64_t> positions;        // [num_tokens], position of each token in its sequence
  // Per KV cache group g (models/kv_cache_layout.h; one unless the cache is hybrid), in the
  // group's block size bs: slot = block_id * bs + offset; -1 writes nothing.
  std::vector<int64_t> slot_mapping;     // [num_kv_groups, num_tokens]
  std::vector<int64_t> query_start_loc;  // [num_seqs + 1], token offsets of each sequence
  std::vector<int64_t> seq_lens;         // [num_seqs], context length after this step
  std::vector<int32_t> block_tables;     // [num_kv_groups, num_seqs, max_blocks_per_seq], 0-padded
  int64_t max_blocks_per_seq = 0;
  int64_t num_kv_groups = 1;
  std::vector<int64_t> logits_indices;   // [num_logits], token rows whose logits are returned

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
};

/// A ForwardBatch's arrays in backend memory, persistent across steps (the model runner keeps
/// one and uploads each step's batch into it; a buffer grows when a batch needs more).
struct ForwardBatchBuffers {
  Buffer token_ids, positions, slot_mapping, query_start_loc, seq_lens, block_tables,
      logits_indices;

  /// Allocates room for max_tokens tokens, max_seqs sequences, max_blocks_per_seq blocks each,
  /// in num_kv_groups groups.
  void reserve(Backend& backend, int64_t max_tokens, int64_t max_seqs, int64_t max_blocks_per_seq,
               int64_t num_kv_groups = 1);
  /// Copies b's arrays into the buffers (growing any that is too small).
  void upload(Backend& backend, const ForwardBatch& b);
};

}  // namespace octet
