// PagedAttention's FlashInfer paths (attention.h): decode rows (flashinfer_decode.h; the plan
// is FlashInferDecodeRows, pages read from the device block table) eagerly and in graphs, and
// prefill rows (flashinfer_prefill.h; FlashInferPrefillRequests, pages listed from the host
// block table) eagerly. Plans go up through the pinned plan slots (eager) or into a graph's
// plan buffer before each replay. Rows FlashInfer does not take stay on octet's kernels
// (attention.cu).
#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flashinfer_decode.h"
#include "kernels/cuda/flashinfer_layout.h"
#include "kernels/cuda/flashinfer_plan.h"
#include "kernels/cuda/flashinfer_prefill.h"

namespace octet::cuda_kernels {

namespace {

int64_t chunk_tokens(int64_t block_size) {
  return (kFlashInferChunkTokens + block_size - 1) / block_size * block_size;
}

// The cache fields FlashInferDecode and FlashInferPrefill share (scales for FP8 caches only).
template <typename Args>
void set_cache(Args& a, const KVCacheView& cache) {
  a.dtype = cache.dtype;
  a.k = cache.k;
  a.v = cache.v;
  a.k_scale = dtype_is_fp8(cache.dtype) ? cache.k_scale : nullptr;
  a.v_scale = dtype_is_fp8(cache.dtype) ? cache.v_scale : nullptr;
  a.block_size = cache.block_size;
  a.num_kv_heads = cache.num_kv_heads;
  a.head_dim = cache.head_dim;
}

FlashInferDecode decode_args(const KVCacheView& cache, const float* q,
                             const PagedAttentionBatch& b, int64_t rows, int64_t num_heads,
                             int64_t window, float softmax_scale, float* out, const int32_t* plan,
                             const FlashInferDecodeLayout& l, int64_t items, int64_t sm_count,
                             float* partials, int64_t first_row, int64_t last_row) {
  FlashInferDecode a;
  set_cache(a, cache);
  a.num_heads = num_heads;
  a.q = q;
  a.out = out;
  a.rows = rows;
  a.merge_first_row = first_row;
  a.merge_rows = last_row - first_row;
  a.block_tables = b.block_tables;
  const FlashInferDecodeArrays arrays = flashinfer_decode_arrays(plan, l);
  a.kv_chunk_tokens = arrays.chunk_tokens;
  a.page_start = arrays.page_start;
  a.kv_len = arrays.kv_len;
  a.o_indptr = arrays.o_indptr;
  a.item_count = arrays.item_count;
  a.sm_count = sm_count;
  a.request_indices = arrays.request_indices;
  a.kv_tile_indices = arrays.kv_tile_indices;
  a.num_items = items;
  a.window_left = window > 0 ? window - 1 : -1;
  a.softmax_scale = softmax_scale;
  a.partial_out = partials;
  a.partial_lse = partials + items * num_heads * cache.head_dim;
  return a;
}

FlashInferPlanInput plan_input(int64_t block_size, int64_t num_blocks,
                               const PagedAttentionBatch& b, const int64_t* qsl,
                               const int64_t* lens, int64_t window) {
  FlashInferPlanInput in;
  in.num_seqs = b.num_seqs;
  in.query_start_loc = qsl;
  in.seq_lens = lens;
  in.block_tables = b.host_block_tables;
  in.max_blocks_per_seq = b.max_blocks_per_seq;
  in.block_size = block_size;
  in.num_blocks = num_blocks;
  in.sliding_window = window;
  in.kv_chunk_tokens = chunk_tokens(block_size);
  return in;
}

// Ranges [first, last) of 0..n whose costs (cost(i) = {ints, items}) fit the limits with
// `fixed_ints` more each; a unit alone beyond them is an OCTET_CHECK abort naming `what`.
template <typename Cost>
std::vector<std::pair<int64_t, int64_t>> fitting_ranges(int64_t n, int64_t fixed_ints,
                                                        int64_t max_ints, int64_t max_items,
                                                        const char* what, Cost cost) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t first = 0, ints = fixed_ints, items = 0;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    const std::pair<int64_t, int64_t> c = cost(i);
    if (c.first == 0 && c.second == 0) continue;
    if (any && (ints + c.first > max_ints || items + c.second > max_items)) {
      ranges.emplace_back(first, i);
      first = i, ints = fixed_ints, items = 0;
    }
    OCTET_CHECK(fixed_ints + c.first <= max_ints && c.second <= max_items, "cuda ", what, ": ",
                i, " needs ", c.second, " items and ", fixed_ints + c.first,
                " plan ints; the reserved workspace holds ", max_items, " and ", max_ints);
    if (!any) first = i;
    any = true;
    ints += c.first;
    items += c.second;
  }
  if (any) ranges.emplace_back(first, n);
  return ranges;
}

}  // namespace

std::string PagedAttention::describe() const {
  const std::string octet_kernels =
      "paged_decode_split + paged_decode_merge (" + std::to_string(kPartitionTokens) +
      "-position partitions), paged_prefill_tiled (" + std::to_string(kTileRows) +
      " queries x " + std::to_string(kKvTile) + " positions), FP32 scores, softmax and P.V";
  if (!flashinfer_) return octet_kernels;
  return "FlashInfer 0.7.4 batch decode (" + std::to_string(kFlashInferChunkTokens) +
         "-token chunks, FP32 q, octet's merge) and FA2 batch prefill (tensor cores, 16-bit q, " +
         std::to_string(kFlashInferPrefillTileQ) + "-row query tiles) for head_dim 64 / 128 "
         "over bf16, fp16 and FP8 caches; otherwise " + octet_kernels;
}

bool PagedAttention::uses_flashinfer(const KVCacheView& cache, const PagedAttentionBatch& b,
                                     int64_t num_heads) const {
  return flashinfer_ && cache.k_token_scale == nullptr && cache.num_kv_heads > 0 &&
         cache.block_size > 0 && num_heads % cache.num_kv_heads == 0 &&
         flashinfer_decode_supported(cache.dtype, cache.head_dim,
                                     num_heads / cache.num_kv_heads) &&
         flashinfer_decode_addressable(b.num_seqs, b.max_blocks_per_seq, cache.block_size,
                                       chunk_tokens(cache.block_size));
}

bool PagedAttention::uses_flashinfer_prefill(const KVCacheView& cache,
                                             const PagedAttentionBatch& b) const {
  return flashinfer_ && b.host_block_tables != nullptr && cache.k_token_scale == nullptr &&
         flashinfer_prefill_supported(cache.dtype, cache.head_dim);
}

void PagedAttention::run_flashinfer(const KVCacheView& cache, const float* q,
                                    const PagedAttentionBatch& b, const int64_t* qsl,
                                    const int64_t* lens, int64_t num_heads, int64_t window,
                                    float softmax_scale, float* out, cudaStream_t stream) {
  const FlashInferPlanInput in =
      plan_input(cache.block_size, cache.num_blocks, b, qsl, lens, window);
  const int64_t rows = b.num_seqs > 0 ? qsl[b.num_seqs] : 0;
  const int64_t per_item = num_heads * (cache.head_dim + 1);
  int64_t max_ints = std::numeric_limits<int64_t>::max(), max_items = max_ints;
  if (reserved_) {
    max_ints = static_cast<int64_t>(work_bytes_ / sizeof(int32_t));
    max_items = static_cast<int64_t>(partial_floats_) / per_item;
  }
  const int64_t C = in.kv_chunk_tokens, bs = cache.block_size;
  // Row r's items (0 for prefill rows): ceil(kept / C), kept from the window's first page.
  std::vector<int64_t> row_items(static_cast<size_t>(rows), 0);
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const int64_t nq = qsl[s + 1] - qsl[s];
    OCTET_CHECK(nq >= 0 && qsl[s + 1] <= rows && lens[s] >= nq, "cuda paged_attention: "
                "sequence ", s, ": ", nq, " queries, seq_len ", lens[s]);
    if (nq >= kFlashInferPrefillMinQueries) continue;
    for (int64_t j = 0; j < nq; ++j) {
      const int64_t end = lens[s] - nq + j + 1;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, end - window) : 0;
      row_items[static_cast<size_t>(qsl[s] + j)] = (end - lo / bs * bs + C - 1) / C;
    }
  }
  const auto cost = [&](int64_t r) -> std::pair<int64_t, int64_t> {
    return {2 * row_items[static_cast<size_t>(r)], row_items[static_cast<size_t>(r)]};
  };
  const int64_t fixed = static_cast<int64_t>(flashinfer_decode_layout(rows, 0).ints);
  for (const auto& [first, last] :
       fitting_ranges(rows, fixed, max_ints, max_items, "paged_attention decode row", cost)) {
    FlashInferDecodeRows d;
    try {
      d = flashinfer_decode_rows(in, first, last);
    } catch (const std::invalid_argument& e) {
      OCTET_CHECK(false, "cuda paged_attention: ", e.what());
    }
    if (d.num_items() == 0) continue;
    const FlashInferDecodeLayout l = flashinfer_decode_layout(rows, d.num_items());
    const size_t bytes = l.ints * sizeof(int32_t);
    reserve_device(bytes, static_cast<size_t>(d.num_items() * per_item), stream);
    PlanSlot& slot = next_plan_slot(bytes);
    fill_flashinfer_decode(l, d, C, slot.pinned);
    // Stream order: after the kernels of the previous chunk or call that read work_.
    OCTET_CUDA_CHECK(cudaMemcpyAsync(work_, slot.pinned, bytes, cudaMemcpyHostToDevice, stream));
    OCTET_CUDA_CHECK(cudaEventRecord(slot.copied, stream));
    flashinfer_decode(decode_args(cache, q, b, rows, num_heads, window, softmax_scale, out,
                                  static_cast<const int32_t*>(work_), l, d.num_items(),
                                  sm_count(),
                                  static_cast<float*>(partials_.get()), first, last),
                      stream);
  }
}

void PagedAttention::run_flashinfer_prefill(const KVCacheView& cache, const float* q,
                                            const PagedAttentionBatch& b, const int64_t* qsl,
                                            const int64_t* lens, int64_t num_heads,
                                            int64_t window, float softmax_scale, float* out,
                                            cudaStream_t stream) {
  const FlashInferPlanInput in =
      plan_input(cache.block_size, cache.num_blocks, b, qsl, lens, window);
  const int64_t rows = b.num_seqs > 0 ? qsl[b.num_seqs] : 0, R = b.num_seqs;
  const int64_t group = num_heads / cache.num_kv_heads, bs = cache.block_size;
  // A sequence's cost: 3 ints a query tile and its kept pages (make_flashinfer_plan's).
  const auto cost = [&](int64_t s) -> std::pair<int64_t, int64_t> {
    const int64_t nq = qsl[s + 1] - qsl[s];
    if (nq < kFlashInferPrefillMinQueries) return {0, 0};
    const int64_t first_pos = lens[s] - nq;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, first_pos - window + 1) : 0;
    const int64_t pages = (lens[s] + bs - 1) / bs - lo / bs;
    return {3 * flashinfer_prefill_tiles(nq, group) + pages, 1};
  };
  // The buffer without items or pages (flashinfer_layout.h); 3 ints an item, 1 a page.
  const int64_t fixed = static_cast<int64_t>(flashinfer_prefill_layout(R, 0, rows, 0).ints);
  int64_t max_ints = std::numeric_limits<int64_t>::max();
  if (reserved_) max_ints = static_cast<int64_t>(work_bytes_ / sizeof(int32_t));
  const std::vector<std::pair<int64_t, int64_t>> chunks =
      fitting_ranges(R, fixed, max_ints, std::numeric_limits<int64_t>::max(),
                     "paged_attention prefill sequence", cost);
  if (chunks.empty()) return;  // no prefill rows
  const size_t half_bytes =
      static_cast<size_t>(2 * rows * num_heads * cache.head_dim) * 2;  // q16 and o16
  if (half_bytes > half_bytes_) {
    OCTET_CHECK(!reserved_, "cuda paged_attention prefill: ", rows, " rows need ", half_bytes,
                " bytes of 16-bit q and output; the reserved workspace holds ", half_bytes_);
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued kernels may use the old one
    half_.reset();
    half_ = device_buffer(std::max(half_bytes, 2 * half_bytes_));
    half_bytes_ = std::max(half_bytes, 2 * half_bytes_);
  }
  for (const auto& [first, last] : chunks) {
    FlashInferPrefillRequests pr;
    try {
      pr = flashinfer_prefill_requests(in, first, last, group, kFlashInferPrefillTileQ);
    } catch (const std::invalid_argument& e) {
      OCTET_CHECK(false, "cuda paged_attention: ", e.what());
    }
    const FlashInferPrefillLayout l = flashinfer_prefill_layout(pr);
    const size_t bytes = l.ints * sizeof(int32_t);
    reserve_device(bytes, 0, stream);
    PlanSlot& slot = next_plan_slot(bytes);
    fill_flashinfer_prefill(l, pr, in.kv_chunk_tokens, slot.pinned);
    OCTET_CUDA_CHECK(cudaMemcpyAsync(work_, slot.pinned, bytes, cudaMemcpyHostToDevice, stream));
    OCTET_CUDA_CHECK(cudaEventRecord(slot.copied, stream));
    const FlashInferPrefillArrays w =
        flashinfer_prefill_arrays(static_cast<const int32_t*>(work_), l);
    FlashInferPrefill a;
    set_cache(a, cache);
    a.num_heads = num_heads;
    a.q = q;
    a.out = out;
    a.rows = rows;
    a.q16 = half_.get();
    a.o16 = static_cast<char*>(half_.get()) + half_bytes / 2;
    a.num_requests = pr.num_requests();
    a.num_items = pr.num_items();
    a.kv_chunk_tokens = w.chunk_tokens;
    a.qo_indptr = w.qo_indptr;
    a.kv_indptr = w.kv_indptr;
    a.kv_last_page_len = w.kv_last_page_len;
    a.request_indices = w.request_indices;
    a.qo_tile_indices = w.qo_tile_indices;
    a.kv_tile_indices = w.kv_tile_indices;
    a.row_is_prefill = w.row_is_prefill;
    a.kv_indices = w.kv_indices;
    a.window_left = window > 0 ? window - 1 : -1;
    a.softmax_scale = softmax_scale;
    flashinfer_prefill(a, stream);
  }
}

void PagedAttention::capture_flashinfer(GraphAttention& g, GraphAttention::Plan& p,
                                        const KVCacheView& cache, const float* q,
                                        const PagedAttentionBatch& b, int64_t num_heads,
                                        float softmax_scale, float* out, cudaStream_t stream) {
  if (p.device == nullptr) {
    p.fi_items = b.num_seqs * flashinfer_max_chunks(b.max_blocks_per_seq, cache.block_size,
                                                    chunk_tokens(cache.block_size));
    OCTET_CHECK(p.fi_items < (int64_t{1} << 31), "cuda paged_attention capture: ", p.fi_items,
                " items");
    const size_t ints = flashinfer_decode_layout(b.num_seqs, p.fi_items).ints;
    // Relaxed capture mode (CudaBackend::begin_capture) allows cudaMalloc here.
    OCTET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p.device), ints * sizeof(int32_t)));
    p.pinned_offset = g.pinned_ints;
    g.pinned_ints += ints;
  }
  const size_t need = static_cast<size_t>(p.fi_items * num_heads * (cache.head_dim + 1));
  if (need > partial_floats_) {
    OCTET_CHECK(!reserved_, "cuda paged_attention capture: a graph of ", b.num_seqs,
                " sequences needs ", need, " partial floats; the reserved workspace holds ",
                partial_floats_);
    if (partials_) g.partials.push_back(partials_);
    partials_ = device_buffer(need * sizeof(float));
    partial_floats_ = need;
  }
  g.partials.push_back(partials_);
  flashinfer_decode(decode_args(cache, q, b, b.num_seqs, num_heads, p.window, softmax_scale,
                                out, p.device, flashinfer_decode_layout(b.num_seqs, p.fi_items),
                                p.fi_items, sm_count(),
                                static_cast<float*>(partials_.get()), 0,
                                b.num_seqs),
                    stream);
}

void PagedAttention::prepare_replay_flashinfer(GraphAttention& g, GraphAttention::Plan& p,
                                               const PagedAttentionBatch& b,
                                               cudaStream_t stream) {
  FlashInferDecodeRows d;
  try {
    d = flashinfer_decode_rows(plan_input(p.block_size, 0, b, b.host_query_start_loc,
                                          b.host_seq_lens, p.window),
                               0, b.num_seqs);
  } catch (const std::invalid_argument& e) {
    OCTET_CHECK(false, "cuda graph replay: ", e.what());
  }
  const int64_t used = d.num_items();
  OCTET_CHECK(d.rows() == p.num_seqs && d.o_indptr.back() == used && used <= p.fi_items,
              "cuda graph replay: not a decode step of ", p.num_seqs, " sequences (", d.rows(),
              " rows, ", used, " items of ", p.fi_items, ")");
  for (int64_t r = 0; r < d.rows(); ++r)
    OCTET_CHECK(d.kv_len[r] > 0, "cuda graph replay: row ", r, " is not a decode row");
  d = pad_flashinfer_decode_rows(std::move(d), p.fi_items);
  const FlashInferDecodeLayout l = flashinfer_decode_layout(p.num_seqs, p.fi_items);
  int32_t* pin = g.pinned + p.pinned_offset;
  fill_flashinfer_decode(l, d, chunk_tokens(p.block_size), pin);
  // The padded items' request and tile entries need not travel: the kernel stops at the count.
  OCTET_CUDA_CHECK(cudaMemcpyAsync(p.device, pin, l.req * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream));
  for (size_t at : {l.req, l.tile})
    if (used > 0)
      OCTET_CUDA_CHECK(cudaMemcpyAsync(p.device + at, pin + at, used * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream));
}

}  // namespace octet::cuda_kernels
