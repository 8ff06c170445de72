// The FlashInfer plans of flashinfer_plan.h as the one int32 buffer a call uploads (eager: a
// pinned plan slot, then the attention plan buffer; graphs: their plan buffer before each
// replay), and the arrays the kernels read from it. Host-only C++17: test_flashinfer_plan
// checks that every array read back is the plan's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/flashinfer_plan.h"

namespace octet::cuda_kernels {

/// A decode plan's buffer, offsets in ints: [0] the split size (kv_chunk_tokens), [1] the
/// items to do, then page_start [rows + 1], kv_len [rows], o_indptr [rows + 1],
/// request_indices [items], kv_tile_indices [items]. A graph uploads [0, req) whole and the
/// used items of the last two: the kernel visits only the count.
struct FlashInferDecodeLayout {
  size_t page_start = 2, kv_len = 0, o_indptr = 0, req = 0, tile = 0, ints = 0;
};

inline FlashInferDecodeLayout flashinfer_decode_layout(int64_t rows, int64_t items) {
  FlashInferDecodeLayout l;
  l.kv_len = l.page_start + static_cast<size_t>(rows + 1);
  l.o_indptr = l.kv_len + static_cast<size_t>(rows);
  l.req = l.o_indptr + static_cast<size_t>(rows + 1);
  l.tile = l.req + static_cast<size_t>(items);
  l.ints = l.tile + static_cast<size_t>(items);
  return l;
}

/// Writes d into dst laid out as l (made for d's rows and at least its items): the count is
/// o_indptr[rows], a graph's padding items past it are written but never run.
inline void fill_flashinfer_decode(const FlashInferDecodeLayout& l, const FlashInferDecodeRows& d,
                                   int64_t chunk_tokens, int32_t* dst) {
  dst[0] = static_cast<int32_t>(chunk_tokens);
  dst[1] = d.o_indptr.back();
  std::copy(d.page_start.begin(), d.page_start.end(), dst + l.page_start);
  std::copy(d.kv_len.begin(), d.kv_len.end(), dst + l.kv_len);
  std::copy(d.o_indptr.begin(), d.o_indptr.end(), dst + l.o_indptr);
  std::copy(d.request_indices.begin(), d.request_indices.end(), dst + l.req);
  std::copy(d.kv_tile_indices.begin(), d.kv_tile_indices.end(), dst + l.tile);
}

/// The arrays of a decode buffer at `base` laid out as l.
struct FlashInferDecodeArrays {
  const int32_t* chunk_tokens;
  const int32_t* item_count;
  const int32_t* page_start;
  const int32_t* kv_len;
  const int32_t* o_indptr;
  const int32_t* request_indices;
  const int32_t* kv_tile_indices;
};

inline FlashInferDecodeArrays flashinfer_decode_arrays(const int32_t* base,
                                                       const FlashInferDecodeLayout& l) {
  return {base, base + 1, base + l.page_start, base + l.kv_len, base + l.o_indptr,
          base + l.req, base + l.tile};
}

/// A prefill plan's buffer, offsets in ints: [0] the split size, qo_indptr [R + 1], kv_indptr
/// [R + 1], kv_last_page_len [R], request_indices [W], qo_tile_indices [W], kv_tile_indices
/// [W] (zeros: never split), row_is_prefill [rows] (bytes, rounded up to ints), kv_indices [P].
struct FlashInferPrefillLayout {
  size_t qo_indptr = 1, kv_indptr = 0, last_page = 0, req = 0, qo_tile = 0, kv_tile = 0,
         rows = 0, indices = 0, ints = 0;
};

inline FlashInferPrefillLayout flashinfer_prefill_layout(int64_t requests, int64_t items,
                                                         int64_t rows, int64_t pages) {
  FlashInferPrefillLayout l;
  l.kv_indptr = l.qo_indptr + static_cast<size_t>(requests + 1);
  l.last_page = l.kv_indptr + static_cast<size_t>(requests + 1);
  l.req = l.last_page + static_cast<size_t>(requests);
  l.qo_tile = l.req + static_cast<size_t>(items);
  l.kv_tile = l.qo_tile + static_cast<size_t>(items);
  l.rows = l.kv_tile + static_cast<size_t>(items);
  l.indices = l.rows + static_cast<size_t>((rows + 3) / 4);
  l.ints = l.indices + static_cast<size_t>(pages);
  return l;
}

/// The layout of p's buffer.
inline FlashInferPrefillLayout flashinfer_prefill_layout(const FlashInferPrefillRequests& p) {
  return flashinfer_prefill_layout(p.num_requests(), p.num_items(),
                                   static_cast<int64_t>(p.row_is_prefill.size()),
                                   static_cast<int64_t>(p.kv_indices.size()));
}

inline void fill_flashinfer_prefill(const FlashInferPrefillLayout& l,
                                    const FlashInferPrefillRequests& p, int64_t chunk_tokens,
                                    int32_t* dst) {
  dst[0] = static_cast<int32_t>(chunk_tokens);
  std::copy(p.qo_indptr.begin(), p.qo_indptr.end(), dst + l.qo_indptr);
  std::copy(p.kv_indptr.begin(), p.kv_indptr.end(), dst + l.kv_indptr);
  std::copy(p.kv_last_page_len.begin(), p.kv_last_page_len.end(), dst + l.last_page);
  std::copy(p.request_indices.begin(), p.request_indices.end(), dst + l.req);
  std::copy(p.qo_tile_indices.begin(), p.qo_tile_indices.end(), dst + l.qo_tile);
  std::fill(dst + l.kv_tile, dst + l.rows, 0);
  std::fill(dst + l.rows, dst + l.indices, 0);
  std::memcpy(dst + l.rows, p.row_is_prefill.data(), p.row_is_prefill.size());
  std::copy(p.kv_indices.begin(), p.kv_indices.end(), dst + l.indices);
}

/// The arrays of a prefill buffer at `base` laid out as l.
struct FlashInferPrefillArrays {
  const int32_t* chunk_tokens;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const int32_t* kv_last_page_len;
  const int32_t* request_indices;
  const int32_t* qo_tile_indices;
  const int32_t* kv_tile_indices;
  const uint8_t* row_is_prefill;
  const int32_t* kv_indices;
};

inline FlashInferPrefillArrays flashinfer_prefill_arrays(const int32_t* base,
                                                         const FlashInferPrefillLayout& l) {
  return {base,
          base + l.qo_indptr,
          base + l.kv_indptr,
          base + l.last_page,
          base + l.req,
          base + l.qo_tile,
          base + l.kv_tile,
          reinterpret_cast<const uint8_t*>(base + l.rows),
          base + l.indices};
}

}  // namespace octet::cuda_kernels
