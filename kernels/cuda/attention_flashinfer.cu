// PagedAttention's FlashInfer decode (attention.h, flashinfer_decode.h): the host plan of the
// decode rows (flashinfer_plan.h, request = query row), its upload through the pinned plan
// slots (eager) or into a graph's plan buffer before each replay, and the launches. Prefill
// rows stay on octet's kernels (attention.cu).
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/common/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flashinfer_decode.h"
#include "kernels/cuda/flashinfer_plan.h"

namespace octet::cuda_kernels {

namespace {

// A decode plan in one int32 buffer: the split size, kv_indptr, kv_last_page_len, o_indptr,
// item_valid (bytes, rounded up to ints), request_indices, kv_tile_indices, kv_indices. A
// graph uploads the prefix up to request_indices whole and the used part of the rest.
struct Layout {
  size_t indptr = 1, last = 0, o_indptr = 0, valid = 0, req = 0, tile = 0, indices = 0,
         ints = 0;
};

Layout layout(int64_t rows, int64_t items, int64_t pages) {
  Layout l;
  l.last = l.indptr + static_cast<size_t>(rows + 1);
  l.o_indptr = l.last + static_cast<size_t>(rows);
  l.valid = l.o_indptr + static_cast<size_t>(rows + 1);
  l.req = l.valid + static_cast<size_t>((items + 3) / 4);
  l.tile = l.req + static_cast<size_t>(items);
  l.indices = l.tile + static_cast<size_t>(items);
  l.ints = l.indices + static_cast<size_t>(pages);
  return l;
}

void fill(const Layout& l, const FlashInferDecodeRows& d, int64_t chunk_tokens, int32_t* dst) {
  dst[0] = static_cast<int32_t>(chunk_tokens);
  std::copy(d.kv_indptr.begin(), d.kv_indptr.end(), dst + l.indptr);
  std::copy(d.kv_last_page_len.begin(), d.kv_last_page_len.end(), dst + l.last);
  std::copy(d.o_indptr.begin(), d.o_indptr.end(), dst + l.o_indptr);
  std::memset(dst + l.valid, 0, (l.req - l.valid) * sizeof(int32_t));
  std::memcpy(dst + l.valid, d.item_valid.data(), d.item_valid.size());
  std::copy(d.request_indices.begin(), d.request_indices.end(), dst + l.req);
  std::copy(d.kv_tile_indices.begin(), d.kv_tile_indices.end(), dst + l.tile);
  std::copy(d.kv_indices.begin(), d.kv_indices.end(), dst + l.indices);
}

FlashInferDecode decode_args(const KVCacheView& cache, const float* q, int64_t rows,
                             int64_t num_heads, int64_t window, float softmax_scale, float* out,
                             const int32_t* plan, const Layout& l, int64_t items, bool masked,
                             float* partials) {
  FlashInferDecode a;
  a.dtype = cache.dtype;
  a.k = cache.k;
  a.v = cache.v;
  a.k_scale = dtype_is_fp8(cache.dtype) ? cache.k_scale : nullptr;
  a.v_scale = dtype_is_fp8(cache.dtype) ? cache.v_scale : nullptr;
  a.block_size = cache.block_size;
  a.num_kv_heads = cache.num_kv_heads;
  a.head_dim = cache.head_dim;
  a.num_heads = num_heads;
  a.q = q;
  a.out = out;
  a.rows = rows;
  a.kv_chunk_tokens = plan;
  a.kv_indptr = plan + l.indptr;
  a.kv_last_page_len = plan + l.last;
  a.o_indptr = plan + l.o_indptr;
  a.item_valid = masked ? reinterpret_cast<const uint8_t*>(plan + l.valid) : nullptr;
  a.request_indices = plan + l.req;
  a.kv_tile_indices = plan + l.tile;
  a.kv_indices = plan + l.indices;
  a.num_items = items;
  a.window_left = window > 0 ? window - 1 : -1;
  a.softmax_scale = softmax_scale;
  a.partial_out = partials;
  a.partial_lse = partials + items * num_heads * cache.head_dim;
  return a;
}

FlashInferPlanInput plan_input(const KVCacheView& cache, const PagedAttentionBatch& b,
                               const int64_t* qsl, const int64_t* lens, int64_t window,
                               const int32_t* host_tables) {
  FlashInferPlanInput in;
  in.num_seqs = b.num_seqs;
  in.query_start_loc = qsl;
  in.seq_lens = lens;
  in.block_tables = host_tables;
  in.max_blocks_per_seq = b.max_blocks_per_seq;
  in.block_size = cache.block_size;
  in.num_blocks = cache.num_blocks;
  in.sliding_window = window;
  in.kv_chunk_tokens = (kFlashInferChunkTokens + cache.block_size - 1) / cache.block_size *
                       cache.block_size;
  return in;
}

}  // namespace

bool PagedAttention::uses_flashinfer(const KVCacheView& cache, const PagedAttentionBatch& b,
                                     int64_t num_heads) const {
  return flashinfer_ && b.host_block_tables != nullptr && cache.k_token_scale == nullptr &&
         cache.num_kv_heads > 0 && num_heads % cache.num_kv_heads == 0 &&
         flashinfer_decode_supported(cache.dtype, cache.head_dim, num_heads / cache.num_kv_heads);
}

void PagedAttention::run_flashinfer(const KVCacheView& cache, const float* q,
                                    const PagedAttentionBatch& b, const int64_t* qsl,
                                    const int64_t* lens, int64_t num_heads, int64_t window,
                                    float softmax_scale, float* out, cudaStream_t stream) {
  const FlashInferPlanInput in = plan_input(cache, b, qsl, lens, window, b.host_block_tables);
  FlashInferPlan plan;
  try {
    plan = make_flashinfer_plan(in);
  } catch (const std::invalid_argument& e) {
    OCTET_CHECK(false, "cuda paged_attention: ", e.what());
  }
  const int64_t rows = plan.num_rows();
  const int64_t per_item = num_heads * (cache.head_dim + 1);
  // Reserved: chunks of whole decode requests within the plan and partials buffers.
  int64_t max_ints = std::numeric_limits<int64_t>::max(), max_items = max_ints;
  if (reserved_) {
    max_ints = static_cast<int64_t>(work_bytes_ / sizeof(int32_t));
    max_items = static_cast<int64_t>(partial_floats_) / per_item;
  }
  const int64_t fixed = static_cast<int64_t>(layout(rows, 0, 0).ints) + 1;
  for (int64_t first = 0; first < plan.num_requests();) {
    int64_t last = first, items = 0, ints = fixed;
    for (; last < plan.num_requests(); ++last) {
      if (plan.is_prefill[last]) continue;
      const int64_t add_items = plan.num_chunks[last];
      const int64_t add_ints = plan.kv_indptr[last + 1] - plan.kv_indptr[last] + 3 * add_items;
      if (items > 0 && (items + add_items > max_items || ints + add_ints > max_ints)) break;
      OCTET_CHECK(add_items <= max_items && ints + add_ints <= max_ints, "cuda paged_attention: "
                  "one query row needs ", add_items, " FlashInfer items and ", ints + add_ints,
                  " plan ints; the reserved workspace holds ", max_items, " and ", max_ints);
      items += add_items;
      ints += add_ints;
    }
    const FlashInferDecodeRows d = flashinfer_decode_rows(plan, first, last);
    first = last;
    if (d.num_items() == 0) continue;
    const Layout l = layout(rows, d.num_items(), static_cast<int64_t>(d.kv_indices.size()));
    const size_t bytes = l.ints * sizeof(int32_t);
    reserve_device(bytes, static_cast<size_t>(d.num_items() * per_item), stream);
    PlanSlot& slot = next_plan_slot(bytes);
    fill(l, d, in.kv_chunk_tokens, slot.pinned);
    // Stream order: after the kernels of the previous chunk or call that read work_.
    OCTET_CUDA_CHECK(cudaMemcpyAsync(work_, slot.pinned, bytes, cudaMemcpyHostToDevice, stream));
    OCTET_CUDA_CHECK(cudaEventRecord(slot.copied, stream));
    flashinfer_decode(decode_args(cache, q, rows, num_heads, window, softmax_scale, out,
                                  static_cast<const int32_t*>(work_), l, d.num_items(), false,
                                  static_cast<float*>(partials_.get())),
                      stream);
  }
}

void PagedAttention::capture_flashinfer(GraphAttention& g, GraphAttention::Plan& p,
                                        const KVCacheView& cache, const float* q,
                                        const PagedAttentionBatch& b, int64_t num_heads,
                                        float softmax_scale, float* out, cudaStream_t stream) {
  const int64_t chunk = (kFlashInferChunkTokens + cache.block_size - 1) / cache.block_size *
                        cache.block_size;
  if (p.device == nullptr) {
    p.fi_items = b.num_seqs * flashinfer_max_chunks(b.max_blocks_per_seq, cache.block_size, chunk);
    p.fi_pages = b.num_seqs * b.max_blocks_per_seq;
    OCTET_CHECK(p.fi_items < (int64_t{1} << 31) && p.fi_pages < (int64_t{1} << 31),
                "cuda paged_attention capture: ", p.fi_items, " items, ", p.fi_pages, " pages");
    const size_t ints = layout(b.num_seqs, p.fi_items, p.fi_pages).ints;
    // Relaxed capture mode (CudaBackend::begin_capture) allows cudaMalloc here.
    OCTET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p.device), ints * sizeof(int32_t)));
    p.pinned_offset = g.pinned_ints;
    g.pinned_ints += ints;
  }
  const int64_t per_item = num_heads * (cache.head_dim + 1);
  const size_t need = static_cast<size_t>(p.fi_items * per_item);
  if (need > partial_floats_) {
    OCTET_CHECK(!reserved_, "cuda paged_attention capture: a graph of ", b.num_seqs,
                " sequences needs ", need, " partial floats; the reserved workspace holds ",
                partial_floats_);
    if (partials_) g.partials.push_back(partials_);
    partials_ = device_buffer(need * sizeof(float));
    partial_floats_ = need;
  }
  g.partials.push_back(partials_);
  const Layout l = layout(b.num_seqs, p.fi_items, p.fi_pages);
  flashinfer_decode(decode_args(cache, q, b.num_seqs, num_heads, p.window, softmax_scale, out,
                                p.device, l, p.fi_items, true,
                                static_cast<float*>(partials_.get())),
                    stream);
}

void PagedAttention::prepare_replay_flashinfer(GraphAttention& g, GraphAttention::Plan& p,
                                               const PagedAttentionBatch& b,
                                               cudaStream_t stream) {
  OCTET_CHECK(b.host_block_tables != nullptr,
              "cuda graph replay: the batch needs its host block_tables (FlashInfer plans)");
  KVCacheView shape;
  shape.block_size = p.block_size;
  shape.num_blocks = p.num_blocks;
  FlashInferDecodeRows d;
  try {
    const FlashInferPlan plan = make_flashinfer_plan(
        plan_input(shape, b, b.host_query_start_loc, b.host_seq_lens, p.window,
                   b.host_block_tables + p.table_offset));
    OCTET_CHECK(plan.num_rows() == p.num_seqs, "cuda graph replay: ", plan.num_rows(),
                " rows, captured for ", p.num_seqs);
    for (int64_t i = 0; i < plan.num_requests(); ++i)
      OCTET_CHECK(!plan.is_prefill[i], "cuda graph replay: not a decode step");
    d = pad_flashinfer_decode_rows(flashinfer_decode_rows(plan, 0, plan.num_requests()),
                                   p.fi_items);
  } catch (const std::invalid_argument& e) {
    OCTET_CHECK(false, "cuda graph replay: ", e.what());
  }
  const int64_t used_items = d.o_indptr.back(), pages = static_cast<int64_t>(d.kv_indices.size());
  OCTET_CHECK(pages <= p.fi_pages, "cuda graph replay: ", pages, " pages");
  const Layout full = layout(p.num_seqs, p.fi_items, p.fi_pages);
  int32_t* pin = g.pinned + p.pinned_offset;
  const int64_t chunk = (kFlashInferChunkTokens + p.block_size - 1) / p.block_size *
                        p.block_size;
  // The padded items' request and tile entries stay as they are: item_valid masks them.
  d.request_indices.resize(static_cast<size_t>(used_items));
  d.kv_tile_indices.resize(static_cast<size_t>(used_items));
  fill(full, d, chunk, pin);
  const auto upload = [&](size_t at, size_t ints) {
    if (ints > 0)
      OCTET_CUDA_CHECK(cudaMemcpyAsync(p.device + at, pin + at, ints * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream));
  };
  upload(0, full.req);
  upload(full.req, static_cast<size_t>(used_items));
  upload(full.tile, static_cast<size_t>(used_items));
  upload(full.indices, static_cast<size_t>(pages));
}

}  // namespace octet::cuda_kernels
