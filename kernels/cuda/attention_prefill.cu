// Paged attention for prefill chunks (attention.h): the tiled, flash-attention-style kernel.
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"

namespace octet::cuda_kernels::attention_detail {

namespace {

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
      // The tile's P.V in its own sum, then one rescale-and-add into the row's: chains of 32
      // and n / 32 instead of one of n (a tighter FP32 error bound over long contexts).
      float tile[kDimsPerLane];
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) tile[i] = 0.0f;
      for (int jj = 0; jj < kWarpSize; ++jj) {
        const float pj = __shfl_sync(0xFFFFFFFFu, w, jj);
        if (pj == 0.0f) continue;  // warp-uniform; a masked position adds nothing
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int64_t d = lane + kWarpSize * i;
          if (d < hd) tile[i] = __fmaf_rn(pj, v_s[jj * hd + d], tile[i]);
        }
      }
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i)
        acc[jr][i] = cm::add_rn(cm::mul_rn(acc[jr][i], alpha), tile[i]);
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
void launch_prefill_as(const Launch& a, cudaStream_t stream) {
  if (a.num_prefill == 0) return;
  const size_t smem = prefill_smem_bytes(a.kv.head_dim);
  if (smem > 48 * 1024) {
    OCTET_CUDA_CHECK(cudaFuncSetAttribute(paged_prefill_tiled_kernel<D>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  }
  paged_prefill_tiled_kernel<D><<<dim3(static_cast<unsigned>(a.num_prefill),
                                       static_cast<unsigned>(a.num_heads)),
                                  kThreads, smem, stream>>>(a.kv, a.q, a.prefill_items,
                                                            a.num_heads, a.window, a.scale,
                                                            a.out);
  OCTET_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_prefill(const Launch& a, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::F32: return launch_prefill_as<DType::F32>(a, stream);
    case DType::BF16: return launch_prefill_as<DType::BF16>(a, stream);
    case DType::F16: return launch_prefill_as<DType::F16>(a, stream);
    case DType::FP8_E4M3: return launch_prefill_as<DType::FP8_E4M3>(a, stream);
    case DType::FP8_E5M2: return launch_prefill_as<DType::FP8_E5M2>(a, stream);
  }
}

}  // namespace octet::cuda_kernels::attention_detail
