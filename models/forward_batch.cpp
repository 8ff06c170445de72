#include "models/forward_batch.h"

namespace octet {

namespace {

void ensure(Backend& backend, Buffer& buf, int64_t bytes) {
  if (buf.bytes() < bytes) buf = backend.allocate(bytes);
}

template <class T>
void put(Backend& backend, Buffer& buf, const std::vector<T>& v) {
  const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(T));
  ensure(backend, buf, bytes);
  backend.upload(buf, 0, v.data(), bytes);
}

}  // namespace

void ForwardBatchBuffers::reserve(Backend& backend, int64_t max_tokens, int64_t max_seqs,
                                  int64_t max_blocks_per_seq, int64_t num_kv_groups) {
  ensure(backend, token_ids, max_tokens * 4);
  ensure(backend, positions, max_tokens * 8);
  ensure(backend, slot_mapping, num_kv_groups * max_tokens * 8);
  ensure(backend, query_start_loc, (max_seqs + 1) * 8);
  ensure(backend, seq_lens, max_seqs * 8);
  ensure(backend, block_tables, num_kv_groups * max_seqs * max_blocks_per_seq * 4);
  ensure(backend, logits_indices, max_tokens * 8);
}

void ForwardBatchBuffers::upload(Backend& backend, const ForwardBatch& b) {
  put(backend, token_ids, b.token_ids);
  put(backend, positions, b.positions);
  put(backend, slot_mapping, b.slot_mapping);
  put(backend, query_start_loc, b.query_start_loc);
  put(backend, seq_lens, b.seq_lens);
  put(backend, block_tables, b.block_tables);
  put(backend, logits_indices, b.logits_indices);
}

}  // namespace octet
