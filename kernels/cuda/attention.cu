// write_kv_cache and paged attention on the GPU (attention.h). FP32 everywhere after the load:
// cached values are decoded exactly (device_math.h), FP8 scales fold into q (k_scale) and the
// output (v_scale), scores / softmax state / P.V accumulate in FP32.
// Layouts: cache [num_blocks, block_size, num_kv_heads, head_dim]; q, out [tokens, heads,
// head_dim]; position p of sequence s lives in slot block_tables[s][p / bs] * bs + p % bs.
#include "kernels/cuda/attention.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include "kernels/common/check.h"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flashinfer_decode.h"
#include "kernels/cuda/flashinfer_prefill.h"
#include "kernels/cuda/flashinfer_plan.h"
#include "kernels/cuda/rope.cuh"

namespace octet::cuda_kernels {

static_assert(kFlashInferPrefillMinQueries == kPrefillMinQueries,
              "the FlashInfer plan splits decode rows from prefills as this file does");

using namespace attention_detail;

namespace {

// Token t's cache slot, or -1 (not stored); a slot past the cache traps.
__device__ __forceinline__ int64_t checked_slot(const int64_t* __restrict__ slots, int64_t t,
                                                int64_t num_slots) {
  const int64_t slot = slots[t];
  if (slot >= num_slots) {
    printf("octet cuda write_kv_cache: slot %lld outside [0, %lld)\n",
           static_cast<long long>(slot), static_cast<long long>(num_slots));
    __trap();
  }
  return slot;
}

// KV head h's scale for an FP8 cache (1 otherwise); one not positive and finite traps.
template <DType D>
__device__ __forceinline__ float checked_scale(const float* __restrict__ scale, int64_t h) {
  if constexpr (!is_fp8(D)) {
    return 1.0f;
  } else {
    const float s = scale[h];
    if (!(s > 0.0f) || isinf(s)) {
      printf("octet cuda write_kv_cache: FP8 scale not positive and finite\n");
      __trap();
    }
    return s;
  }
}

// One thread per (token, KV head, dim) element, K and V both.
template <DType D>
__global__ void write_kv_kernel(uint8_t* __restrict__ kc, uint8_t* __restrict__ vc,
                                const float* __restrict__ k_scale,
                                const float* __restrict__ v_scale, int64_t num_slots,
                                int64_t kv_heads, int64_t head_dim, const float* __restrict__ k,
                                const float* __restrict__ v, const int64_t* __restrict__ slots,
                                int64_t n) {
  const int64_t row = kv_heads * head_dim, total = n * row;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / row, rem = idx % row;
    const int64_t slot = checked_slot(slots, t, num_slots);
    if (slot < 0) continue;
    const int64_t h = rem / head_dim;
    store_kv<D>(kc, slot * row + rem, k[idx], checked_scale<D>(k_scale, h));
    store_kv<D>(vc, slot * row + rem, v[idx], checked_scale<D>(v_scale, h));
  }
}

// rope_kernel (elementwise.cu) and write_kv_kernel in one grid: units [0, R) rotate one pair
// of q or k (R = n x (q_heads + kv_heads) x half), a k pair then stored to the cache; units
// [R, R + U) store k's unrotated dims [2 half, head_dim) (U = n x kv_heads x that many); the
// rest store v. The same arithmetic and conversions as the two kernels.
template <DType D>
__global__ void rope_write_kv_kernel(float* __restrict__ q, int64_t q_heads,
                                     float* __restrict__ k, const float* __restrict__ v,
                                     int64_t n, int64_t kv_heads, int64_t head_dim, int64_t half,
                                     const int64_t* __restrict__ positions,
                                     const float* __restrict__ inv_freq, bool adjacent,
                                     uint8_t* __restrict__ kc, uint8_t* __restrict__ vc,
                                     const float* __restrict__ k_scale,
                                     const float* __restrict__ v_scale, int64_t num_slots,
                                     const int64_t* __restrict__ slots) {
  const int64_t heads = q_heads + kv_heads, row = kv_heads * head_dim;
  const int64_t rotated = n * heads * half, rest = head_dim - 2 * half;
  const int64_t unrotated = n * kv_heads * rest, total = rotated + unrotated + n * row;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (idx < rotated) {
      const int64_t i = idx % half, th = idx / half, t = th / heads, h = th % heads;
      const float pos = static_cast<float>(positions[t]);
      int64_t a, b;
      if (h < q_heads) {
        rope_rotate_pair(q + (t * q_heads + h) * head_dim, i, half, adjacent, pos, inv_freq[i],
                         a, b);
        continue;
      }
      const int64_t kh = h - q_heads;
      float* xh = k + (t * kv_heads + kh) * head_dim;
      rope_rotate_pair(xh, i, half, adjacent, pos, inv_freq[i], a, b);
      const int64_t slot = checked_slot(slots, t, num_slots);
      if (slot < 0) continue;
      const float ks = checked_scale<D>(k_scale, kh);
      store_kv<D>(kc, slot * row + kh * head_dim + a, xh[a], ks);
      store_kv<D>(kc, slot * row + kh * head_dim + b, xh[b], ks);
    } else if (idx < rotated + unrotated) {
      const int64_t u = idx - rotated, d = 2 * half + u % rest, tk = u / rest;
      const int64_t t = tk / kv_heads, kh = tk % kv_heads;
      const int64_t slot = checked_slot(slots, t, num_slots);
      if (slot < 0) continue;
      store_kv<D>(kc, slot * row + kh * head_dim + d, k[tk * head_dim + d],
                  checked_scale<D>(k_scale, kh));
    } else {
      const int64_t u = idx - rotated - unrotated, t = u / row, rem = u % row;
      const int64_t slot = checked_slot(slots, t, num_slots);
      if (slot < 0) continue;
      store_kv<D>(vc, slot * row + rem, v[u], checked_scale<D>(v_scale, rem / head_dim));
    }
  }
}

template <DType D>
void launch_rope_write_kv(const RopeWriteKv& a, const KVCacheView& c, cudaStream_t stream) {
  const int64_t half = a.rot_dim / 2;
  const int64_t total = a.n * (a.q_heads + c.num_kv_heads) * half +
                        a.n * c.num_kv_heads * (c.head_dim - 2 * half) +
                        a.n * c.num_kv_heads * c.head_dim;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 8192);
  rope_write_kv_kernel<D><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      a.q, a.q_heads, a.k, a.v, a.n, c.num_kv_heads, c.head_dim, half, a.positions, a.inv_freq,
      a.layout == RopeLayout::AdjacentPairs, static_cast<uint8_t*>(c.k),
      static_cast<uint8_t*>(c.v), c.k_scale, c.v_scale, c.num_blocks * c.block_size, a.slots);
  OCTET_CUDA_CHECK_LAUNCH();
}


template <DType D>
void launch_write_kv(const KVCacheView& c, const float* k, const float* v, const int64_t* slots,
                     int64_t n, cudaStream_t stream) {
  const int64_t total = n * c.num_kv_heads * c.head_dim;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 8192);
  write_kv_kernel<D><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<uint8_t*>(c.k), static_cast<uint8_t*>(c.v), c.k_scale, c.v_scale,
      c.num_blocks * c.block_size, c.num_kv_heads, c.head_dim, k, v, slots, n);
  OCTET_CUDA_CHECK_LAUNCH();
}


}  // namespace

namespace {

void check_cache_write(const KVCacheView& cache, int64_t n) {
  OCTET_CHECK(n >= 0 && cache.k != nullptr && cache.v != nullptr && cache.num_kv_heads > 0 &&
                  cache.head_dim > 0 && cache.block_size > 0,
              "cuda write_kv_cache: bad cache view or n ", n);
  OCTET_CHECK(!dtype_is_fp8(cache.dtype) || (cache.k_scale != nullptr && cache.v_scale != nullptr),
              "cuda write_kv_cache: an FP8 cache needs k_scale and v_scale");
}

}  // namespace

void rope_write_kv(const RopeWriteKv& a, const KVCacheView& cache, cudaStream_t stream) {
  check_cache_write(cache, a.n);
  OCTET_CHECK(a.k != nullptr && a.rot_dim >= 0 && a.rot_dim <= cache.head_dim &&
                  a.rot_dim % 2 == 0,
              "cuda rope_write_kv: rot_dim ", a.rot_dim, " head_dim ", cache.head_dim);
  if (a.n == 0) return;
  switch (cache.dtype) {
    case DType::F32: return launch_rope_write_kv<DType::F32>(a, cache, stream);
    case DType::BF16: return launch_rope_write_kv<DType::BF16>(a, cache, stream);
    case DType::F16: return launch_rope_write_kv<DType::F16>(a, cache, stream);
    case DType::FP8_E4M3: return launch_rope_write_kv<DType::FP8_E4M3>(a, cache, stream);
    case DType::FP8_E5M2: return launch_rope_write_kv<DType::FP8_E5M2>(a, cache, stream);
  }
}

void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t n, cudaStream_t stream) {
  check_cache_write(cache, n);
  if (n == 0) return;
  switch (cache.dtype) {
    case DType::F32: return launch_write_kv<DType::F32>(cache, k, v, slot_mapping, n, stream);
    case DType::BF16: return launch_write_kv<DType::BF16>(cache, k, v, slot_mapping, n, stream);
    case DType::F16: return launch_write_kv<DType::F16>(cache, k, v, slot_mapping, n, stream);
    case DType::FP8_E4M3: return launch_write_kv<DType::FP8_E4M3>(cache, k, v, slot_mapping, n, stream);
    case DType::FP8_E5M2: return launch_write_kv<DType::FP8_E5M2>(cache, k, v, slot_mapping, n, stream);
  }
}

namespace {

// Partitions of kPartitionTokens positions a query row at position < cap spans at most.
int64_t max_partitions(int64_t cap) { return cap > 0 ? (cap - 1) / kPartitionTokens + 1 : 1; }

}  // namespace

AttentionWorkspace attention_workspace(int64_t max_tokens, int64_t max_seqs,
                                       int64_t max_model_len, int64_t block_size,
                                       int64_t num_heads, int64_t head_dim,
                                       int64_t max_graph_seqs) {
  AttentionWorkspace w;
  if (max_tokens <= 0 || max_seqs <= 0 || num_heads <= 0 || head_dim <= 0) return w;
  // Eager: rows of < kPrefillMinQueries queries take the decode kernels, each over at most
  // P partitions of its positions (< max_model_len); prefill tiles of kTileRows queries.
  const int64_t p_eager = max_partitions(max_model_len);
  const int64_t rows = std::min(max_tokens, (kPrefillMinQueries - 1) * max_seqs);
  const int64_t merges = p_eager >= 2 ? rows : 0;
  const int64_t tiles =
      max_tokens / kTileRows + std::min(max_seqs, max_tokens / kPrefillMinQueries) + 1;
  w.plan_bytes = 4 * (kDecodeItemInts * rows * p_eager + kMergeItemInts * merges +
                      kPrefillItemInts * tiles);
  // FlashInfer's decode (attention_flashinfer.cu) keeps a partial state for every item, one
  // row's at least, and its plan lists every row of the batch and one row's pages at least.
  int64_t slots = std::min(rows * p_eager, std::max(p_eager, kEagerPartialSlots));
  if (block_size > 0) {
    // Decode: 3 ints a row and 2 an item; prefill: 3 a request (<= rows), a row bit, 3 a query
    // tile (<= tokens x heads / tile + seqs) and one sequence's pages at least.
    const int64_t pages = (max_model_len + block_size - 1) / block_size + 1;
    const int64_t tiles = max_tokens * num_heads / kFlashInferPrefillTileQ + max_seqs + 1;
    w.plan_bytes = std::max(w.plan_bytes, 4 * (8 + 3 * max_tokens + 3 * p_eager));
    w.plan_bytes = std::max(w.plan_bytes, 4 * (8 + 3 * max_tokens + max_tokens / 4 + 3 * tiles +
                                               pages));
  }
  w.prefill_bytes = 2 * 2 * max_tokens * num_heads * head_dim;
  // Graphs: every decode item of the largest one at the block table's full capacity.
  if (max_graph_seqs > 0 && block_size > 0 && max_model_len > 0) {
    const int64_t cap = (max_model_len + block_size - 1) / block_size * block_size;
    slots = std::max(slots, max_graph_seqs * max_partitions(cap));
  }
  w.partial_floats = slots * num_heads * (head_dim + 2);
  return w;
}

PagedAttention::PagedAttention() {
  int device = 0, sms = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&device));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  grid_cap_ = std::max<int64_t>(1, kGridItemsPerSm * sms);
  flashinfer_ = flashinfer_decode_available();
}

PagedAttention::~PagedAttention() {
  // Destructors must not abort: errors (a lost device at exit) are ignored here.
  for (PlanSlot& slot : slots_) {
    if (slot.copied != nullptr) {
      cudaEventSynchronize(slot.copied);
      cudaEventDestroy(slot.copied);
    }
    cudaFreeHost(slot.pinned);
  }
  cudaFree(work_);
}

void PagedAttention::reserve_device(size_t work_bytes, size_t partial_floats,
                                    cudaStream_t stream) {
  if (work_bytes <= work_bytes_ && partial_floats <= partial_floats_) return;
  OCTET_CHECK(!reserved_, "cuda paged_attention: a chunk of ", work_bytes, " plan bytes and ",
              partial_floats, " partial floats exceeds the reserved workspace (", work_bytes_,
              " bytes, ", partial_floats_, " floats)");
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued kernels may use the old buffers
  if (work_bytes > work_bytes_) {
    OCTET_CUDA_CHECK(cudaFree(work_));
    work_ = nullptr;
    work_bytes_ = std::max(work_bytes, 2 * work_bytes_);
    OCTET_CUDA_CHECK(cudaMalloc(&work_, work_bytes_));
  }
  if (partial_floats > partial_floats_) {
    const size_t want = std::max(partial_floats, 2 * partial_floats_);
    partials_.reset();  // freed here unless a graph still holds it
    partial_floats_ = 0;
    partials_ = device_buffer(want * sizeof(float));
    partial_floats_ = want;
  }
}

void PagedAttention::reserve(const AttentionWorkspace& w, cudaStream_t stream) {
  OCTET_CHECK(capturing_ == nullptr, "cuda paged_attention: reserve during a graph capture");
  OCTET_CHECK(w.plan_bytes >= 0 && w.partial_floats >= 0, "cuda paged_attention: reserve ",
              w.plan_bytes, " bytes, ", w.partial_floats, " floats");
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));
  OCTET_CUDA_CHECK(cudaFree(work_));
  work_ = nullptr;
  work_bytes_ = 0;
  partials_.reset();
  partial_floats_ = 0;
  half_.reset();
  half_bytes_ = 0;
  reserved_ = false;
  if (w.plan_bytes > 0) {
    const cudaError_t err = cudaMalloc(&work_, static_cast<size_t>(w.plan_bytes));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      work_ = nullptr;
      throw std::bad_alloc();
    }
    OCTET_CUDA_CHECK(err);
    work_bytes_ = static_cast<size_t>(w.plan_bytes);
  }
  if (w.partial_floats > 0) {
    partials_ = device_buffer(static_cast<size_t>(w.partial_floats) * sizeof(float));
    partial_floats_ = static_cast<size_t>(w.partial_floats);
  }
  if (w.prefill_bytes > 0) {
    half_ = device_buffer(static_cast<size_t>(w.prefill_bytes));
    half_bytes_ = static_cast<size_t>(w.prefill_bytes);
  }
  reserved_ = true;
}

// The work of one call (or one chunk of it), as int32 records: decode items, merge items,
// prefill items; slots: partial softmax states the merges read, numbered from 0.
struct HostPlan {
  std::vector<int32_t> decode, merge, prefill;
  int64_t slots = 0;
  int64_t ints() const {
    return static_cast<int64_t>(decode.size() + merge.size() + prefill.size());
  }
};

namespace {

// The shape checks every call passes (eager or captured).
void check_call(const KVCacheView& cache, int64_t num_heads, int64_t window) {
  const int64_t hd = cache.head_dim;
  OCTET_CHECK(cache.k != nullptr && cache.v != nullptr && cache.num_kv_heads > 0 && hd > 0 &&
                  cache.block_size > 0 && num_heads > 0 && num_heads % cache.num_kv_heads == 0,
              "cuda paged_attention: bad shapes: heads ", num_heads, " kv heads ",
              cache.num_kv_heads, " head_dim ", hd);
  OCTET_CHECK(hd <= kMaxHeadDim, "cuda paged_attention: head_dim ", hd, " > ", kMaxHeadDim);
  OCTET_CHECK(num_heads < 65536, "cuda paged_attention: ", num_heads, " heads");
  OCTET_CHECK(window >= 0, "cuda paged_attention: sliding_window ", window);
  OCTET_CHECK(!dtype_is_fp8(cache.dtype) || (cache.k_scale != nullptr && cache.v_scale != nullptr),
              "cuda paged_attention: an FP8 cache needs k_scale and v_scale");
}

// Ints of a graph plan's device layout (attention.h GraphAttention).
size_t graph_plan_ints(int64_t max_decode, int64_t max_merge) {
  return static_cast<size_t>(2 + max_decode * kDecodeItemInts + max_merge * kMergeItemInts);
}

// Plans the batch (the host copies qsl, lens) for `window` over a block-table capacity of
// `cap` positions into chunks of whole query rows (and prefill tiles), each within max_slots
// partial states and max_ints plan ints (the reserved workspace; no limit for graphs, which
// take one chunk). The items are the same whatever the chunking: only their slot numbers
// change, which no arithmetic reads. A broken batch, or one row that alone exceeds the
// limits, is an OCTET_CHECK abort. decode_rows / prefill_rows false: rows of sequences with
// fewer / at least kPrefillMinQueries queries are left out (FlashInfer runs them).
void build_plan(const PagedAttentionBatch& b, const int64_t* qsl, const int64_t* lens,
                int64_t window, int64_t cap, int64_t max_slots, int64_t max_ints,
                std::vector<HostPlan>& chunks, bool decode_rows = true,
                bool prefill_rows = true) {
  OCTET_CHECK(qsl[0] == 0, "cuda paged_attention: query_start_loc[0] = ", qsl[0]);
  chunks.assign(1, HostPlan{});
  // The chunk that takes a unit of `ints` plan ints and `slots` partial states.
  const auto chunk_for = [&](int64_t ints, int64_t slots) -> HostPlan& {
    OCTET_CHECK(ints <= max_ints && slots <= max_slots, "cuda paged_attention: one query row "
                "needs ", slots, " partial states and ", ints, " plan ints; the reserved "
                "workspace holds ", max_slots, " and ", max_ints, " (reserve_workspace was "
                "given a shorter max_model_len or other heads)");
    HostPlan* c = &chunks.back();
    if (c->ints() > 0 && (c->ints() + ints > max_ints || c->slots + slots > max_slots)) {
      chunks.emplace_back();
      c = &chunks.back();
    }
    return *c;
  };
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const int64_t nq = qsl[s + 1] - qsl[s], len = lens[s];
    OCTET_CHECK(nq >= 0 && nq <= len && len <= cap && len < (int64_t{1} << 30),
                "cuda paged_attention: sequence ", s, ": ", nq, " queries, seq_len ", len,
                ", block table capacity ", cap);
    const int32_t seq = static_cast<int32_t>(s);
    if (nq == 0) continue;
    if (nq < kPrefillMinQueries) {
      for (int64_t i = 0; i < nq && decode_rows; ++i) {
        const int64_t row = qsl[s] + i, pos = len - nq + i;
        const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
        const int64_t j0 = lo / kPartitionTokens, j1 = pos / kPartitionTokens;
        if (j0 == j1) {
          HostPlan& c = chunk_for(kDecodeItemInts, 0);
          c.decode.insert(c.decode.end(), {static_cast<int32_t>(row), seq, static_cast<int32_t>(lo),
                                           static_cast<int32_t>(pos + 1), -1});
          continue;
        }
        const int64_t parts = j1 - j0 + 1;
        HostPlan& c = chunk_for(kMergeItemInts + kDecodeItemInts * parts, parts);
        OCTET_CHECK(c.slots + parts < (int64_t{1} << 31), "cuda paged_attention: batch too large");
        c.merge.insert(c.merge.end(), {static_cast<int32_t>(row), static_cast<int32_t>(c.slots),
                                       static_cast<int32_t>(parts)});
        for (int64_t j = j0; j <= j1; ++j) {
          const int64_t pb = std::max(lo, j * kPartitionTokens);
          const int64_t pe = std::min(pos + 1, (j + 1) * kPartitionTokens);
          c.decode.insert(c.decode.end(),
                          {static_cast<int32_t>(row), seq, static_cast<int32_t>(pb),
                           static_cast<int32_t>(pe), static_cast<int32_t>(c.slots++)});
        }
      }
    } else {
      for (int64_t r0 = 0; r0 < nq && prefill_rows; r0 += kTileRows) {
        HostPlan& c = chunk_for(kPrefillItemInts, 0);
        c.prefill.insert(c.prefill.end(), {seq, static_cast<int32_t>(qsl[s] + r0),
                                           static_cast<int32_t>(std::min(kTileRows, nq - r0)),
                                           static_cast<int32_t>(len - nq + r0)});
      }
    }
    OCTET_CHECK(qsl[s + 1] < (int64_t{1} << 31), "cuda paged_attention: batch too large");
  }
}

}  // namespace

void PagedAttention::run(const KVCacheView& cache, const float* q, const PagedAttentionBatch& b,
                         const int64_t* qsl, const int64_t* lens, int64_t num_heads,
                         int64_t window, float softmax_scale, float* out, cudaStream_t stream) {
  check_call(cache, num_heads, window);
  // Reserved: chunks that fit the workspace (none grows); else one chunk (buffers grow).
  int64_t max_slots = std::numeric_limits<int64_t>::max(), max_ints = max_slots;
  if (reserved_) {
    max_slots = static_cast<int64_t>(partial_floats_) / (num_heads * (cache.head_dim + 2));
    max_ints = static_cast<int64_t>(work_bytes_ / sizeof(int32_t));
  }
  const bool decode = uses_flashinfer(cache, b, num_heads);
  const bool prefill = uses_flashinfer_prefill(cache, b);
  if (decode) run_flashinfer(cache, q, b, qsl, lens, num_heads, window, softmax_scale, out, stream);
  if (prefill)
    run_flashinfer_prefill(cache, q, b, qsl, lens, num_heads, window, softmax_scale, out, stream);
  std::vector<HostPlan> chunks;
  build_plan(b, qsl, lens, window, b.max_blocks_per_seq * cache.block_size, max_slots, max_ints,
             chunks, !decode, !prefill);
  for (const HostPlan& plan : chunks)
    if (plan.ints() > 0)
      run_chunk(plan, cache, q, b, num_heads, window, softmax_scale, out, stream);
}

PagedAttention::PlanSlot& PagedAttention::next_plan_slot(size_t bytes) {
  PlanSlot& slot = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % kPlanSlots;
  if (slot.copied == nullptr) {
    OCTET_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  } else {
    OCTET_CUDA_CHECK(cudaEventSynchronize(slot.copied));  // its last plan has left it
  }
  if (bytes > slot.bytes) {
    const size_t want = std::max(bytes, 2 * slot.bytes);
    OCTET_CUDA_CHECK(cudaFreeHost(slot.pinned));
    slot.pinned = nullptr;
    slot.bytes = 0;
    OCTET_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&slot.pinned), want));
    slot.bytes = want;
  }
  return slot;
}

void PagedAttention::run_chunk(const HostPlan& plan, const KVCacheView& cache, const float* q,
                               const PagedAttentionBatch& b, int64_t num_heads, int64_t window,
                               float softmax_scale, float* out, cudaStream_t stream) {
  const int64_t hd = cache.head_dim;
  const std::vector<int32_t>& decode = plan.decode;
  const std::vector<int32_t>& merge = plan.merge;
  const std::vector<int32_t>& prefill = plan.prefill;
  const size_t bytes = static_cast<size_t>(plan.ints()) * sizeof(int32_t);
  reserve_device(bytes, static_cast<size_t>(plan.slots * num_heads * (hd + 2)), stream);
  PlanSlot& slot = next_plan_slot(bytes);
  int32_t* pinned = slot.pinned;
  std::memcpy(pinned, decode.data(), decode.size() * sizeof(int32_t));
  std::memcpy(pinned + decode.size(), merge.data(), merge.size() * sizeof(int32_t));
  std::memcpy(pinned + decode.size() + merge.size(), prefill.data(),
              prefill.size() * sizeof(int32_t));
  // Stream order: this upload into work_ runs after the previous chunk's or call's kernels
  // read it.
  OCTET_CUDA_CHECK(cudaMemcpyAsync(work_, pinned, bytes, cudaMemcpyHostToDevice, stream));
  OCTET_CUDA_CHECK(cudaEventRecord(slot.copied, stream));

  const int32_t* w = static_cast<const int32_t*>(work_);
  Launch a{KvArgs{static_cast<const uint8_t*>(cache.k), static_cast<const uint8_t*>(cache.v),
                  cache.k_scale, cache.v_scale, b.block_tables, b.max_blocks_per_seq,
                  cache.num_blocks, cache.block_size, cache.num_kv_heads, hd},
           q, num_heads, window, softmax_scale, out, static_cast<float*>(partials_.get()),
           w, static_cast<int64_t>(decode.size() / kDecodeItemInts),
           w + decode.size(), static_cast<int64_t>(merge.size() / kMergeItemInts),
           w + decode.size() + merge.size(), static_cast<int64_t>(prefill.size() / kPrefillItemInts)};
  a.grid_cap = grid_cap_;
  launch_decode(a, cache.dtype, stream);
  launch_prefill(a, cache.dtype, stream);
}

GraphAttention::~GraphAttention() {
  // Destructors must not abort. The graph that read these plans is gone (CudaBackend frees it
  // first, after a stream synchronisation).
  if (copied != nullptr) {
    cudaEventSynchronize(copied);
    cudaEventDestroy(copied);
  }
  cudaFreeHost(pinned);
  for (Plan& p : plans) cudaFree(p.device);
}

void PagedAttention::begin_capture() {
  OCTET_CHECK(capturing_ == nullptr, "cuda paged_attention: nested graph capture");
  capturing_ = std::make_shared<GraphAttention>();
}

std::shared_ptr<GraphAttention> PagedAttention::end_capture() {
  OCTET_CHECK(capturing_ != nullptr, "cuda paged_attention: end_capture without begin_capture");
  return std::move(capturing_);
}

void PagedAttention::capture(const KVCacheView& cache, const float* q,
                             const PagedAttentionBatch& b, int64_t num_heads, int64_t window,
                             float softmax_scale, float* out, cudaStream_t stream) {
  OCTET_CHECK(capturing_ != nullptr, "cuda paged_attention: capture() outside a capture");
  check_call(cache, num_heads, window);
  const int64_t hd = cache.head_dim, cap = b.max_blocks_per_seq * cache.block_size;
  OCTET_CHECK(b.num_seqs > 0 && cap > 0, "cuda paged_attention capture: ", b.num_seqs,
              " sequences, block table capacity ", cap);
  if (b.host_query_start_loc != nullptr && b.host_seq_lens != nullptr)
    for (int64_t s = 0; s < b.num_seqs; ++s)
      OCTET_CHECK(b.host_query_start_loc[s + 1] - b.host_query_start_loc[s] == 1,
                  "cuda paged_attention capture: sequence ", s, " has ",
                  b.host_query_start_loc[s + 1] - b.host_query_start_loc[s],
                  " queries (a graph runs decode steps, one query per sequence)");
  GraphAttention& g = *capturing_;
  GraphAttention::Plan* plan = nullptr;
  const bool flashinfer = uses_flashinfer(cache, b, num_heads);
  // One plan per (window, block size): KV cache groups (models/kv_cache_layout.h) may differ
  // in both; the block tables themselves are arguments of each launch.
  for (GraphAttention::Plan& p : g.plans)
    if (p.window == window && p.block_size == cache.block_size && p.flashinfer == flashinfer)
      plan = &p;
  GraphAttention::Plan fresh;  // this call's plan, when the graph has none yet
  fresh.window = window;
  fresh.num_seqs = b.num_seqs;
  fresh.max_blocks_per_seq = b.max_blocks_per_seq;
  fresh.block_size = cache.block_size;
  fresh.flashinfer = flashinfer;
  if (flashinfer) {
    if (plan == nullptr) plan = &g.plans.emplace_back(fresh);
    capture_flashinfer(g, *plan, cache, q, b, num_heads, softmax_scale, out, stream);
    return;
  }
  if (plan == nullptr) {
    GraphAttention::Plan p = fresh;
    // A query at position pos < cap spans at most (cap - 1) / kPartitionTokens + 1 partitions.
    p.max_decode = b.num_seqs * ((cap - 1) / kPartitionTokens + 1);
    p.max_merge = b.num_seqs;
    OCTET_CHECK(p.max_decode < (int64_t{1} << 31), "cuda paged_attention capture: ",
                p.max_decode, " decode items");
    const size_t ints = graph_plan_ints(p.max_decode, p.max_merge);
    // Relaxed capture mode (CudaBackend::begin_capture) allows cudaMalloc here.
    OCTET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p.device), ints * sizeof(int32_t)));
    p.pinned_offset = g.pinned_ints;
    g.pinned_ints += ints;
    g.plans.push_back(p);
    plan = &g.plans.back();
  }
  OCTET_CHECK(plan->num_seqs == b.num_seqs && plan->max_blocks_per_seq == b.max_blocks_per_seq &&
                  plan->block_size == cache.block_size,
              "cuda paged_attention capture: calls of one graph differ in batch shape");
  // Partial softmax states for every decode item at full capacity (none when no row can span
  // two partitions), in the one buffer eager calls and every graph share.
  const size_t need = max_partitions(cap) >= 2
                          ? static_cast<size_t>(plan->max_decode * num_heads * (hd + 2))
                          : 0;
  if (need > partial_floats_) {
    OCTET_CHECK(!reserved_, "cuda paged_attention capture: a graph of ", b.num_seqs,
                " sequences x ", cap, " positions needs ", need, " partial floats; the "
                "reserved workspace holds ", partial_floats_, " (reserve_workspace was given "
                "fewer graph sequences or a shorter max_model_len)");
    if (partials_) g.partials.push_back(partials_);  // queued eager kernels may still use it
    partials_ = device_buffer(need * sizeof(float));  // relaxed capture: cudaMalloc is allowed
    partial_floats_ = need;
  }
  g.partials.push_back(partials_);

  const int32_t* w = plan->device;
  Launch a{KvArgs{static_cast<const uint8_t*>(cache.k), static_cast<const uint8_t*>(cache.v),
                  cache.k_scale, cache.v_scale, b.block_tables, b.max_blocks_per_seq,
                  cache.num_blocks, cache.block_size, cache.num_kv_heads, hd},
           q, num_heads, window, softmax_scale, out, static_cast<float*>(partials_.get()),
           w + 2, plan->max_decode,
           w + 2 + plan->max_decode * kDecodeItemInts, plan->max_merge,
           nullptr, 0, w, w + 1};
  a.grid_cap = grid_cap_;
  launch_decode(a, cache.dtype, stream);
}

void PagedAttention::prepare_replay(GraphAttention& g, const PagedAttentionBatch& b,
                                    cudaStream_t stream) {
  OCTET_CHECK(b.host_query_start_loc != nullptr && b.host_seq_lens != nullptr,
              "cuda graph replay: the batch needs its host query_start_loc and seq_lens");
  if (g.plans.empty()) return;
  if (g.copied == nullptr) {
    OCTET_CUDA_CHECK(cudaEventCreateWithFlags(&g.copied, cudaEventDisableTiming));
    OCTET_CUDA_CHECK(
        cudaMallocHost(reinterpret_cast<void**>(&g.pinned), g.pinned_ints * sizeof(int32_t)));
  } else {
    OCTET_CUDA_CHECK(cudaEventSynchronize(g.copied));  // the last replay's uploads are done
  }
  std::vector<HostPlan> chunks;
  for (GraphAttention::Plan& p : g.plans) {
    OCTET_CHECK(b.num_seqs == p.num_seqs && b.max_blocks_per_seq == p.max_blocks_per_seq,
                "cuda graph replay: batch of ", b.num_seqs, " sequences x ",
                b.max_blocks_per_seq, " blocks, captured for ", p.num_seqs, " x ",
                p.max_blocks_per_seq);
    if (p.flashinfer) {
      prepare_replay_flashinfer(g, p, b, stream);
      continue;
    }
    const int64_t unlimited = std::numeric_limits<int64_t>::max();
    build_plan(b, b.host_query_start_loc, b.host_seq_lens, p.window,
               p.max_blocks_per_seq * p.block_size, unlimited, unlimited, chunks);
    const HostPlan& hp = chunks.front();  // no limits: one chunk
    const int64_t nd = static_cast<int64_t>(hp.decode.size()) / kDecodeItemInts;
    const int64_t nm = static_cast<int64_t>(hp.merge.size()) / kMergeItemInts;
    OCTET_CHECK(hp.prefill.empty() && nd <= p.max_decode && nm <= p.max_merge &&
                    hp.slots <= p.max_decode,
                "cuda graph replay: not a decode step (", hp.prefill.size() / kPrefillItemInts,
                " prefill tiles, ", nd, " decode items of ", p.max_decode, ")");
    int32_t* pin = g.pinned + p.pinned_offset;
    pin[0] = static_cast<int32_t>(nd);
    pin[1] = static_cast<int32_t>(nm);
    std::memcpy(pin + 2, hp.decode.data(), hp.decode.size() * sizeof(int32_t));
    const size_t merge_at = 2 + static_cast<size_t>(p.max_decode * kDecodeItemInts);
    std::memcpy(pin + merge_at, hp.merge.data(), hp.merge.size() * sizeof(int32_t));
    OCTET_CUDA_CHECK(cudaMemcpyAsync(p.device, pin, (2 + hp.decode.size()) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream));
    if (!hp.merge.empty())
      OCTET_CUDA_CHECK(cudaMemcpyAsync(p.device + merge_at, pin + merge_at,
                                       hp.merge.size() * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream));
  }
  OCTET_CUDA_CHECK(cudaEventRecord(g.copied, stream));
}

}  // namespace octet::cuda_kernels
