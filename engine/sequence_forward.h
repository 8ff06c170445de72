#pragma once
// One sequence through every tensor-parallel rank of a loaded model (perplexity, KV-scale
// calibration): LlamaModel's one-sequence forward run on each rank with its own cache. World
// size 1 is LlamaModel::forward on the calling thread, nothing else.
#include <cstdint>
#include <vector>

#include "models/llama.h"

namespace octet {

struct LoadedModel;

/// One zeroed one-sequence FP32 cache per rank (LlamaModel::new_cache; rank r's KV heads);
/// hadamard_rotation: q and k rotated before the write (--kv-cache-rotation hadamard).
std::vector<SequenceKVCache> new_sequence_caches(const LoadedModel& model, int64_t max_tokens,
                                                 bool hadamard_rotation = false);

/// LlamaModel::forward(tokens, n, start_pos, cache, all_logits) on every rank at once; returns
/// rank 0's logits ([n, vocab] or [1, vocab]). Throws as LlamaModel::forward.
std::vector<float> forward_sequence(const LoadedModel& model,
                                    std::vector<SequenceKVCache>& caches, const int32_t* tokens,
                                    int64_t n, int64_t start_pos, bool all_logits);

/// The cached K/V of every KV head, [num_layers, max_tokens, num_key_value_heads, head_dim]
/// (SequenceKVCache::download of each rank, its heads put in place).
DenseKVCache download_sequence_kv(const LoadedModel& model,
                                  const std::vector<SequenceKVCache>& caches);

}  // namespace octet
