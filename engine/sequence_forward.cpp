#include "engine/sequence_forward.h"

#include <algorithm>

#include "engine/model_loader.h"

namespace octet {

std::vector<SequenceKVCache> new_sequence_caches(const LoadedModel& model, int64_t max_tokens,
                                                 bool hadamard_rotation) {
  std::vector<SequenceKVCache> caches;
  for (int r = 0; r < model.world_size(); ++r)
    caches.push_back(model.rank_model(r).new_cache(max_tokens, hadamard_rotation));
  return caches;
}

std::vector<float> forward_sequence(const LoadedModel& model,
                                    std::vector<SequenceKVCache>& caches, const int32_t* tokens,
                                    int64_t n, int64_t start_pos, bool all_logits) {
  // One rank here and no shards elsewhere (multi-node: one local rank, collectives with the
  // other nodes' through the group's communicator).
  if (model.world_size() == 1 && model.model->shard().world_size == 1)
    return model.model->forward(tokens, n, start_pos, caches.at(0), all_logits);
  std::vector<float> logits;
  model.ranks->run([&](int r, Communicator& comm) {
    std::vector<float> l =
        model.rank_model(r).forward(tokens, n, start_pos, caches.at(r), all_logits, comm);
    if (r == 0) logits = std::move(l);
  });
  return logits;
}

DenseKVCache download_sequence_kv(const LoadedModel& model,
                                  const std::vector<SequenceKVCache>& caches) {
  if (model.world_size() == 1) return caches.at(0).download();
  const ModelConfig& c = model.model->config();
  const int64_t hd = c.head_dim, nkv = c.num_key_value_heads, L = c.num_hidden_layers;
  DenseKVCache d;
  d.max_tokens = caches.at(0).max_tokens;
  d.k.resize(static_cast<size_t>(L * d.max_tokens * nkv * hd));
  d.v.resize(d.k.size());
  for (int r = 0; r < model.world_size(); ++r) {
    const TensorParallelShard& s = model.rank_model(r).shard();
    const DenseKVCache part = caches.at(r).download();  // [L, T, s.num_kv_heads, hd]
    for (int64_t row = 0; row < L * d.max_tokens; ++row)  // replicated heads: same values
      for (auto [dst, src] : {std::pair{&d.k, &part.k}, std::pair{&d.v, &part.v}})
        std::copy_n(src->begin() + row * s.kv_dim(), s.kv_dim(),
                    dst->begin() + row * nkv * hd + s.kv_head_begin * hd);
  }
  return d;
}

}  // namespace octet
