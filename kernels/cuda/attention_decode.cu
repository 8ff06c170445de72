// Paged attention for decode rows (attention.h): the split kernel over partitions of
// kPartitionTokens positions and the merge kernel (flash-decoding).
#include <algorithm>

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"

namespace octet::cuda_kernels::attention_detail {

namespace {

// The items a launch does: *count_dev (a graph replay's, written before it) or max_items.
__device__ __forceinline__ int64_t item_count(const int32_t* count_dev, int64_t max_items) {
  return count_dev != nullptr ? static_cast<int64_t>(*count_dev) : max_items;
}

// Decode: blockIdx.y is the head; the blocks of x loop over the items (item = blockIdx.x,
// + gridDim.x, ...); an item is one query row over positions [begin, end) (at most
// kPartitionTokens). Warp w takes positions begin + w, begin + w + 4, ...; lane l holds dims
// l, l + 32, ... Each warp keeps its own online softmax; the four are merged in warp order.
// The loop is uniform per block, so the barriers inside stay block-wide; an iteration's first
// barrier also orders the previous one's reads of w_acc / w_m / w_l before this one's writes.
template <DType D>
__global__ void __launch_bounds__(kThreads, 1)
    paged_decode_split_kernel(KvArgs kv, const float* __restrict__ q,
                              const int32_t* __restrict__ items, int64_t max_items,
                              int64_t num_heads, float softmax_scale, float* __restrict__ out,
                              float* __restrict__ partials,
                              const int32_t* __restrict__ num_items) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float w_acc[kWarps][kMaxHeadDim];
  __shared__ float w_m[kWarps], w_l[kWarps];
  const int64_t count = item_count(num_items, max_items);
  for (int64_t item = blockIdx.x; item < count; item += gridDim.x) {
    const int32_t* it = items + item * kDecodeItemInts;
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
        if (d < hd)
          acc[i] = __fmaf_rn(step.p, load_kv<D>(kv.v, base + d), cm::mul_rn(acc[i], step.alpha));
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
}

// Folds a row's partitions in order (flash-decoding's second pass). blockIdx.y is the head;
// the blocks of x loop over the items as the split kernel's do.
__global__ void __launch_bounds__(kThreads)
    paged_decode_merge_kernel(const int32_t* __restrict__ items, int64_t max_items,
                              const float* __restrict__ partials, int64_t num_heads,
                              int64_t num_kv_heads, int64_t hd, const float* __restrict__ v_scale,
                              float* __restrict__ out, const int32_t* __restrict__ num_items) {
  const int64_t head = blockIdx.y;
  const float vs = v_scale != nullptr ? v_scale[head / (num_heads / num_kv_heads)] : 1.0f;
  const int64_t items_to_do = item_count(num_items, max_items);
  for (int64_t item = blockIdx.x; item < items_to_do; item += gridDim.x) {
    const int32_t* it = items + item * kMergeItemInts;
    const int64_t row = it[0], first = it[1], count = it[2];
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
}

// grid.x of a launch over up to `items` items: at most the cap (blocks loop over the rest).
unsigned capped_grid(int64_t items, int64_t cap) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(items, cap)));
}

template <DType D>
void launch_decode_as(const Launch& a, cudaStream_t stream) {
  const unsigned heads = static_cast<unsigned>(a.num_heads);
  if (a.num_decode > 0) {
    paged_decode_split_kernel<D><<<dim3(capped_grid(a.num_decode, a.grid_cap), heads), kThreads,
                                   0, stream>>>(a.kv, a.q, a.decode_items, a.num_decode,
                                                a.num_heads, a.scale, a.out, a.partials,
                                                a.decode_count);
    OCTET_CUDA_CHECK_LAUNCH();
  }
  if (a.num_merge > 0) {
    paged_decode_merge_kernel<<<dim3(capped_grid(a.num_merge, a.grid_cap), heads), kThreads, 0,
                                stream>>>(a.merge_items, a.num_merge, a.partials, a.num_heads,
                                          a.kv.num_kv_heads, a.kv.head_dim,
                                          is_fp8(D) ? a.kv.v_scale : nullptr, a.out,
                                          a.merge_count);
    OCTET_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_decode(const Launch& a, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::F32: return launch_decode_as<DType::F32>(a, stream);
    case DType::BF16: return launch_decode_as<DType::BF16>(a, stream);
    case DType::F16: return launch_decode_as<DType::F16>(a, stream);
    case DType::FP8_E4M3: return launch_decode_as<DType::FP8_E4M3>(a, stream);
    case DType::FP8_E5M2: return launch_decode_as<DType::FP8_E5M2>(a, stream);
  }
}

}  // namespace octet::cuda_kernels::attention_detail
