// write_kv_cache and paged attention on the GPU (attention.h). FP32 everywhere after the load:
// cached values are decoded exactly (device_math.h), FP8 scales fold into q (k_scale) and the
// output (v_scale), scores / softmax state / P.V accumulate in FP32.
// Layouts: cache [num_blocks, block_size, num_kv_heads, head_dim]; q, out [tokens, heads,
// head_dim]; position p of sequence s lives in slot block_tables[s][p / bs] * bs + p % bs.
#include "kernels/cuda/attention.h"

#include <math.h>

#include <algorithm>
#include <cstring>

#include "kernels/common/check.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.h"

namespace octet::cuda_kernels {

namespace cm = octet::cuda_math;

namespace {

constexpr int kThreads = 128;  // 4 warps, both attention kernels
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kDimsPerLane = static_cast<int>(kMaxHeadDim / kWarpSize);  // 8
constexpr int kRowsPerWarp = static_cast<int>(kTileRows / kWarps);       // 4
constexpr int kDecodeItemInts = 5;   // row, seq, begin, end, partial slot (-1: write out)
constexpr int kMergeItemInts = 3;    // row, first slot, partitions
constexpr int kPrefillItemInts = 4;  // seq, first row, rows, position of the first row
static_assert(kTileRows % kWarps == 0 && kMaxHeadDim % kWarpSize == 0);

// The cache as the kernels see it.
struct KvArgs {
  const uint8_t* k;
  const uint8_t* v;
  const float* k_scale;  // [num_kv_heads], FP8 only
  const float* v_scale;
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq;
  int64_t num_blocks;
  int64_t block_size;
  int64_t num_kv_heads;
  int64_t head_dim;
};

constexpr bool is_fp8(DType d) { return d == DType::FP8_E4M3 || d == DType::FP8_E5M2; }

// Exact value of element `i` of a cache array (FP8: the code's value, without its scale).
template <DType D>
__device__ __forceinline__ float load_kv(const uint8_t* __restrict__ base, int64_t i) {
  if constexpr (D == DType::F32) return reinterpret_cast<const float*>(base)[i];
  if constexpr (D == DType::BF16) return cm::bf16_to_float(reinterpret_cast<const uint16_t*>(base)[i]);
  if constexpr (D == DType::F16) return cm::fp16_to_float(reinterpret_cast<const uint16_t*>(base)[i]);
  if constexpr (D == DType::FP8_E4M3) return cm::e4m3_to_float(base[i]);
  if constexpr (D == DType::FP8_E5M2) return cm::e5m2_to_float(base[i]);
  return 0.0f;
}

template <DType D>
__device__ __forceinline__ void store_kv(uint8_t* __restrict__ base, int64_t i, float x, float scale) {
  if constexpr (D == DType::F32) reinterpret_cast<float*>(base)[i] = x;
  if constexpr (D == DType::BF16) reinterpret_cast<uint16_t*>(base)[i] = cm::bf16_from_float(x);
  if constexpr (D == DType::F16) reinterpret_cast<uint16_t*>(base)[i] = cm::fp16_from_float(x);
  if constexpr (D == DType::FP8_E4M3) base[i] = cm::e4m3_from_float(cm::div_rn(x, scale));
  if constexpr (D == DType::FP8_E5M2) base[i] = cm::e5m2_from_float(cm::div_rn(x, scale));
}

// Slot of position p of the sequence whose block-table row is `table`; traps on a bad block id
// (no printf here: its call would make the attention kernels spill registers around it).
__device__ __forceinline__ int64_t slot_of(const KvArgs& kv, const int32_t* table, int64_t p) {
  const int64_t b = table[p / kv.block_size];
  if (b < 0 || b >= kv.num_blocks) __trap();
  return b * kv.block_size + p % kv.block_size;
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
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    if (slot >= num_slots) {
      printf("octet cuda write_kv_cache: slot %lld outside [0, %lld)\n",
             static_cast<long long>(slot), static_cast<long long>(num_slots));
      __trap();
    }
    float ks = 1.0f, vs = 1.0f;
    if constexpr (is_fp8(D)) {
      ks = k_scale[rem / head_dim];
      vs = v_scale[rem / head_dim];
      if (!(ks > 0.0f) || !(vs > 0.0f) || isinf(ks) || isinf(vs)) {
        printf("octet cuda write_kv_cache: FP8 scale not positive and finite\n");
        __trap();
      }
    }
    store_kv<D>(kc, slot * row + rem, k[idx], ks);
    store_kv<D>(vc, slot * row + rem, v[idx], vs);
  }
}

// Decode: one block per (item, head); an item is one query row over positions [begin, end) (at
// most kPartitionTokens). Warp w takes positions begin + w, begin + w + 4, ...; lane l holds dims
// l, l + 32, ... Each warp keeps its own online softmax; the four are merged in warp order.
template <DType D>
__global__ void __launch_bounds__(kThreads, 1)
    paged_decode_split_kernel(KvArgs kv, const float* __restrict__ q,
                              const int32_t* __restrict__ items, int64_t num_heads,
                              float softmax_scale, float* __restrict__ out,
                              float* __restrict__ partials) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float w_acc[kWarps][kMaxHeadDim];
  __shared__ float w_m[kWarps], w_l[kWarps];
  const int32_t* it = items + static_cast<int64_t>(blockIdx.x) * kDecodeItemInts;
  const int64_t row = it[0], seq = it[1], begin = it[2], end = it[3], slot = it[4];
  const int64_t head = blockIdx.y, hd = kv.head_dim;
  const int64_t kvh = head / (num_heads / kv.num_kv_heads);
  const float vs = is_fp8(D) ? kv.v_scale[kvh] : 1.0f;
  const float q_mul = cm::mul_rn(softmax_scale, is_fp8(D) ? kv.k_scale[kvh] : 1.0f);
  const float* qh = q + (row * num_heads + head) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) q_s[d] = cm::mul_rn(qh[d], q_mul);
  __syncthreads();

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int32_t* table = kv.block_tables + seq * kv.max_blocks_per_seq;
  float m = -INFINITY, l = 0.0f, acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;
  for (int64_t p = begin + warp; p < end; p += kWarps) {
    const int64_t base = (slot_of(kv, table, p) * kv.num_kv_heads + kvh) * hd;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int64_t d = lane + kWarpSize * i;
      if (d < hd) dot = __fmaf_rn(q_s[d], load_kv<D>(kv.k, base + d), dot);
    }
    dot = warp_sum(dot);
    const cm::SoftmaxStep step = cm::online_softmax_update(m, l, dot);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int64_t d = lane + kWarpSize * i;
      if (d < hd) acc[i] = __fmaf_rn(step.p, load_kv<D>(kv.v, base + d), cm::mul_rn(acc[i], step.alpha));
    }
  }
  if (lane == 0) {
    w_m[warp] = m;
    w_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int64_t d = lane + kWarpSize * i;
    if (d < hd) w_acc[warp][d] = acc[i];
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) {
    float bm = -INFINITY, bl = 0.0f, a = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const cm::MergeFactors f = cm::softmax_merge(bm, bl, w_m[w], w_l[w]);
      a = cm::add_rn(cm::mul_rn(a, f.a), cm::mul_rn(w_acc[w][d], f.b));
    }
    if (slot < 0) {
      out[(row * num_heads + head) * hd + d] = cm::softmax_output(a, bl, vs);
    } else {
      float* pp = partials + (slot * num_heads + head) * (hd + 2);
      pp[d] = a;
      if (d == 0) {
        pp[hd] = bm;
        pp[hd + 1] = bl;
      }
    }
  }
}

// Folds a row's partitions in order (flash-decoding's second pass). One block per (item, head).
__global__ void __launch_bounds__(kThreads)
    paged_decode_merge_kernel(const int32_t* __restrict__ items,
                              const float* __restrict__ partials, int64_t num_heads,
                              int64_t num_kv_heads, int64_t hd, const float* __restrict__ v_scale,
                              float* __restrict__ out) {
  const int32_t* it = items + static_cast<int64_t>(blockIdx.x) * kMergeItemInts;
  const int64_t row = it[0], first = it[1], count = it[2];
  const int64_t head = blockIdx.y;
  const float vs = v_scale != nullptr ? v_scale[head / (num_heads / num_kv_heads)] : 1.0f;
  for (int64_t d = threadIdx.x; d < hd; d += kThreads) {
    float bm = -INFINITY, bl = 0.0f, a = 0.0f;
    for (int64_t j = 0; j < count; ++j) {
      const float* pp = partials + ((first + j) * num_heads + head) * (hd + 2);
      const cm::MergeFactors f = cm::softmax_merge(bm, bl, pp[hd], pp[hd + 1]);
      a = cm::add_rn(cm::mul_rn(a, f.a), cm::mul_rn(pp[d], f.b));
    }
    out[(row * num_heads + head) * hd + d] = cm::softmax_output(a, bl, vs);
  }
}

/// Dynamic shared memory of the prefill kernel: q tile, K tile (rows padded by one float
/// against bank conflicts), V tile.
constexpr size_t prefill_smem_bytes(int64_t hd) {
  return static_cast<size_t>(kTileRows * hd + kKvTile * (hd + 1) + kKvTile * hd) * sizeof(float);
}

// Prefill: one block per (tile of up to kTileRows consecutive query rows of one sequence, head).
// K/V tiles of kKvTile positions aligned to absolute multiples of kKvTile go through shared
// memory; warp w owns rows w, w + 4, w + 8, w + 12; lane j scores position t0 + j of the tile;
// lane l holds dims l, l + 32, ... of each row's sum. A position outside a row's causal window
// scores -inf and changes nothing (rescale 1, weight 0), so a row's result does not depend on
// which other rows share its tile.
template <DType D>
__global__ void __launch_bounds__(kThreads)
    paged_prefill_tiled_kernel(KvArgs kv, const float* __restrict__ q,
                               const int32_t* __restrict__ items, int64_t num_heads,
                               int64_t window, float softmax_scale, float* __restrict__ out) {
  extern __shared__ float smem[];
  const int64_t hd = kv.head_dim;
  float* q_s = smem;                      // [kTileRows][hd]
  float* k_s = q_s + kTileRows * hd;      // [kKvTile][hd + 1]
  float* v_s = k_s + kKvTile * (hd + 1);  // [kKvTile][hd]
  const int32_t* it = items + static_cast<int64_t>(blockIdx.x) * kPrefillItemInts;
  const int64_t seq = it[0], row0 = it[1], rows = it[2], pos0 = it[3];
  const int64_t head = blockIdx.y;
  const int64_t kvh = head / (num_heads / kv.num_kv_heads);
  const float vs = is_fp8(D) ? kv.v_scale[kvh] : 1.0f;
  const float q_mul = cm::mul_rn(softmax_scale, is_fp8(D) ? kv.k_scale[kvh] : 1.0f);
  for (int64_t e = threadIdx.x; e < kTileRows * hd; e += kThreads) {
    const int64_t r = e / hd, d = e % hd;
    q_s[e] = r < rows ? cm::mul_rn(q[((row0 + r) * num_heads + head) * hd + d], q_mul) : 0.0f;
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int32_t* table = kv.block_tables + seq * kv.max_blocks_per_seq;
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[j][i] = 0.0f;
  }
  const int64_t pos_last = pos0 + rows - 1;
  const int64_t lo_first = window > 0 && pos0 - window + 1 > 0 ? pos0 - window + 1 : 0;
  for (int64_t t0 = lo_first / kKvTile * kKvTile; t0 <= pos_last; t0 += kKvTile) {
    __syncthreads();  // the previous tile is consumed (first pass: q_s is written)
    for (int64_t e = threadIdx.x; e < kKvTile * hd; e += kThreads) {
      const int64_t j = e / hd, d = e % hd, p = t0 + j;
      float kx = 0.0f, vx = 0.0f;
      if (p <= pos_last) {
        const int64_t base = (slot_of(kv, table, p) * kv.num_kv_heads + kvh) * hd;
        kx = load_kv<D>(kv.k, base + d);
        vx = load_kv<D>(kv.v, base + d);
      }
      k_s[j * (hd + 1) + d] = kx;
      v_s[j * hd + d] = vx;
    }
    __syncthreads();
#pragma unroll
    for (int jr = 0; jr < kRowsPerWarp; ++jr) {
      const int64_t r = warp + kWarps * jr;
      if (r >= rows) continue;  // warp-uniform
      const int64_t pos = pos0 + r;
      const int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
      const int64_t p = t0 + lane;
      float s = -INFINITY;
      if (p >= lo && p <= pos) {
        float dot = 0.0f;
        const float* qr = q_s + r * hd;
        const float* kr = k_s + lane * (hd + 1);
        for (int64_t d = 0; d < hd; ++d) dot = __fmaf_rn(qr[d], kr[d], dot);
        s = dot;
      }
      const float m_new = fmaxf(m[jr], warp_max(s));
      const float alpha = cm::softmax_rescale(m[jr], m_new);
      const float w = cm::softmax_weight(s, m_new);
      l[jr] = cm::add_rn(cm::mul_rn(l[jr], alpha), warp_sum(w));
      m[jr] = m_new;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) acc[jr][i] = cm::mul_rn(acc[jr][i], alpha);
      for (int jj = 0; jj < kWarpSize; ++jj) {
        const float pj = __shfl_sync(0xFFFFFFFFu, w, jj);
        if (pj == 0.0f) continue;  // warp-uniform; a masked position adds nothing
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int64_t d = lane + kWarpSize * i;
          if (d < hd) acc[jr][i] = __fmaf_rn(pj, v_s[jj * hd + d], acc[jr][i]);
        }
      }
    }
  }
#pragma unroll
  for (int jr = 0; jr < kRowsPerWarp; ++jr) {
    const int64_t r = warp + kWarps * jr;
    if (r >= rows) continue;
    float* o = out + ((row0 + r) * num_heads + head) * hd;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int64_t d = lane + kWarpSize * i;
      if (d < hd) o[d] = cm::softmax_output(acc[jr][i], l[jr], vs);
    }
  }
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

struct Launch {
  KvArgs kv;
  const float* q;
  int64_t num_heads, window;
  float scale;
  float* out;
  float* partials;
  const int32_t* decode_items;
  int64_t num_decode;
  const int32_t* merge_items;
  int64_t num_merge;
  const int32_t* prefill_items;
  int64_t num_prefill;
};

template <DType D>
void launch_attention(const Launch& a, cudaStream_t stream) {
  const unsigned heads = static_cast<unsigned>(a.num_heads);
  if (a.num_decode > 0) {
    paged_decode_split_kernel<D><<<dim3(static_cast<unsigned>(a.num_decode), heads), kThreads, 0,
                                   stream>>>(a.kv, a.q, a.decode_items, a.num_heads, a.scale,
                                             a.out, a.partials);
    OCTET_CUDA_CHECK_LAUNCH();
  }
  if (a.num_merge > 0) {
    paged_decode_merge_kernel<<<dim3(static_cast<unsigned>(a.num_merge), heads), kThreads, 0,
                                stream>>>(a.merge_items, a.partials, a.num_heads,
                                          a.kv.num_kv_heads, a.kv.head_dim,
                                          is_fp8(D) ? a.kv.v_scale : nullptr, a.out);
    OCTET_CUDA_CHECK_LAUNCH();
  }
  if (a.num_prefill > 0) {
    const size_t smem = prefill_smem_bytes(a.kv.head_dim);
    if (smem > 48 * 1024) {
      OCTET_CUDA_CHECK(cudaFuncSetAttribute(paged_prefill_tiled_kernel<D>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
    }
    paged_prefill_tiled_kernel<D><<<dim3(static_cast<unsigned>(a.num_prefill), heads), kThreads,
                                    smem, stream>>>(a.kv, a.q, a.prefill_items, a.num_heads,
                                                    a.window, a.scale, a.out);
    OCTET_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t n, cudaStream_t stream) {
  OCTET_CHECK(n >= 0 && cache.k != nullptr && cache.v != nullptr && cache.num_kv_heads > 0 &&
                  cache.head_dim > 0 && cache.block_size > 0,
              "cuda write_kv_cache: bad cache view or n ", n);
  OCTET_CHECK(!dtype_is_fp8(cache.dtype) || (cache.k_scale != nullptr && cache.v_scale != nullptr),
              "cuda write_kv_cache: an FP8 cache needs k_scale and v_scale");
  if (n == 0) return;
  switch (cache.dtype) {
    case DType::F32: return launch_write_kv<DType::F32>(cache, k, v, slot_mapping, n, stream);
    case DType::BF16: return launch_write_kv<DType::BF16>(cache, k, v, slot_mapping, n, stream);
    case DType::F16: return launch_write_kv<DType::F16>(cache, k, v, slot_mapping, n, stream);
    case DType::FP8_E4M3: return launch_write_kv<DType::FP8_E4M3>(cache, k, v, slot_mapping, n, stream);
    case DType::FP8_E5M2: return launch_write_kv<DType::FP8_E5M2>(cache, k, v, slot_mapping, n, stream);
  }
}

PagedAttention::~PagedAttention() {
  // Destructors must not abort: errors (a lost device at exit) are ignored here.
  if (copied_ != nullptr) {
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
  }
  cudaFreeHost(pinned_);
  cudaFree(work_);
  cudaFree(partials_);
}

void PagedAttention::reserve_device(size_t work_bytes, size_t partial_floats,
                                    cudaStream_t stream) {
  if (work_bytes <= work_bytes_ && partial_floats <= partial_floats_) return;
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued kernels may use the old buffers
  if (work_bytes > work_bytes_) {
    OCTET_CUDA_CHECK(cudaFree(work_));
    work_ = nullptr;
    work_bytes_ = std::max(work_bytes, 2 * work_bytes_);
    OCTET_CUDA_CHECK(cudaMalloc(&work_, work_bytes_));
  }
  if (partial_floats > partial_floats_) {
    OCTET_CUDA_CHECK(cudaFree(partials_));
    partials_ = nullptr;
    partial_floats_ = std::max(partial_floats, 2 * partial_floats_);
    OCTET_CUDA_CHECK(cudaMalloc(&partials_, partial_floats_ * sizeof(float)));
  }
}

void PagedAttention::run(const KVCacheView& cache, const float* q, const PagedAttentionBatch& b,
                         const int64_t* qsl, const int64_t* lens, int64_t num_heads,
                         int64_t window, float softmax_scale, float* out, cudaStream_t stream) {
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
  OCTET_CHECK(qsl[0] == 0, "cuda paged_attention: query_start_loc[0] = ", qsl[0]);

  // Plan: decode items, then merge items, then prefill items, as int32 records.
  std::vector<int32_t> decode, merge, prefill;
  int64_t slots = 0;
  const int64_t cap = b.max_blocks_per_seq * cache.block_size;
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const int64_t nq = qsl[s + 1] - qsl[s], len = lens[s];
    OCTET_CHECK(nq >= 0 && nq <= len && len <= cap && len < (int64_t{1} << 30),
                "cuda paged_attention: sequence ", s, ": ", nq, " queries, seq_len ", len,
                ", block table capacity ", cap);
    const int32_t seq = static_cast<int32_t>(s);
    if (nq == 0) continue;
    if (nq < kPrefillMinQueries) {
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t row = qsl[s] + i, pos = len - nq + i;
        const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
        const int64_t j0 = lo / kPartitionTokens, j1 = pos / kPartitionTokens;
        if (j0 == j1) {
          decode.insert(decode.end(), {static_cast<int32_t>(row), seq, static_cast<int32_t>(lo),
                                       static_cast<int32_t>(pos + 1), -1});
          continue;
        }
        merge.insert(merge.end(), {static_cast<int32_t>(row), static_cast<int32_t>(slots),
                                   static_cast<int32_t>(j1 - j0 + 1)});
        for (int64_t j = j0; j <= j1; ++j) {
          const int64_t pb = std::max(lo, j * kPartitionTokens);
          const int64_t pe = std::min(pos + 1, (j + 1) * kPartitionTokens);
          decode.insert(decode.end(), {static_cast<int32_t>(row), seq, static_cast<int32_t>(pb),
                                       static_cast<int32_t>(pe), static_cast<int32_t>(slots++)});
        }
      }
    } else {
      for (int64_t r0 = 0; r0 < nq; r0 += kTileRows) {
        prefill.insert(prefill.end(), {seq, static_cast<int32_t>(qsl[s] + r0),
                                       static_cast<int32_t>(std::min(kTileRows, nq - r0)),
                                       static_cast<int32_t>(len - nq + r0)});
      }
    }
    OCTET_CHECK(qsl[s + 1] < (int64_t{1} << 31) && slots < (int64_t{1} << 31),
                "cuda paged_attention: batch too large");
  }
  const size_t total_ints = decode.size() + merge.size() + prefill.size();
  if (total_ints == 0) return;
  const size_t bytes = total_ints * sizeof(int32_t);
  reserve_device(bytes, static_cast<size_t>(slots * num_heads * (hd + 2)), stream);
  if (copied_ == nullptr) OCTET_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  OCTET_CUDA_CHECK(cudaEventSynchronize(copied_));  // the previous plan has left pinned_
  if (bytes > pinned_bytes_) {
    OCTET_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr;
    pinned_bytes_ = std::max(bytes, 2 * pinned_bytes_);
    OCTET_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_), pinned_bytes_));
  }
  std::memcpy(pinned_, decode.data(), decode.size() * sizeof(int32_t));
  std::memcpy(pinned_ + decode.size(), merge.data(), merge.size() * sizeof(int32_t));
  std::memcpy(pinned_ + decode.size() + merge.size(), prefill.data(),
              prefill.size() * sizeof(int32_t));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(work_, pinned_, bytes, cudaMemcpyHostToDevice, stream));
  OCTET_CUDA_CHECK(cudaEventRecord(copied_, stream));

  const int32_t* w = static_cast<const int32_t*>(work_);
  Launch a{KvArgs{static_cast<const uint8_t*>(cache.k), static_cast<const uint8_t*>(cache.v),
                  cache.k_scale, cache.v_scale, b.block_tables, b.max_blocks_per_seq,
                  cache.num_blocks, cache.block_size, cache.num_kv_heads, hd},
           q, num_heads, window, softmax_scale, out, partials_,
           w, static_cast<int64_t>(decode.size() / kDecodeItemInts),
           w + decode.size(), static_cast<int64_t>(merge.size() / kMergeItemInts),
           w + decode.size() + merge.size(), static_cast<int64_t>(prefill.size() / kPrefillItemInts)};
  switch (cache.dtype) {
    case DType::F32: return launch_attention<DType::F32>(a, stream);
    case DType::BF16: return launch_attention<DType::BF16>(a, stream);
    case DType::F16: return launch_attention<DType::F16>(a, stream);
    case DType::FP8_E4M3: return launch_attention<DType::FP8_E4M3>(a, stream);
    case DType::FP8_E5M2: return launch_attention<DType::FP8_E5M2>(a, stream);
  }
}

}  // namespace octet::cuda_kernels
