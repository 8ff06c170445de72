// Backend::sample_rows on CUDA: one block of kThreads per row, in the phases of
// kernels/common/sampling.h. Filters and sums are those of the CPU reference
// (kernels/cpu/sample_rows.cpp): the max and the top_k threshold are exact selections (a radix
// select on order keys), the top_p bucket masses are exact FP64 sums (shared atomics: order-
// free), and every order-dependent sum (the top_p walk, each block's lanes, the blocks) runs in
// one thread in the reference's order. Costs a handful of passes over a row (L2-resident: a
// 128K vocabulary is 512 KB) and a few microseconds of single-thread FP64 walks per row, except
// top_p on nearly flat rows (see nucleus()).
#include "kernels/cuda/sampling.h"

#include <cuda_runtime.h>
#include <math.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"

namespace octet::cuda_kernels {
namespace {

using namespace sampling_math;

constexpr int kThreads = 1024;
constexpr int kRound = 2 * kThreads;  // top_p walk keys sorted per round
// block_reduce<true> stands 0 in for absent warps: every warp present keeps a row's max right
// when all its logits are negative.
static_assert(kThreads == 32 * kWarpSize, "sample_rows_kernel needs 32 full warps");

struct RowShared {
  double mass[256];           // top_p: FP64 mass per binary exponent of w
  unsigned int hist[256];     // radix-select histogram
  unsigned long long keys[kRound];  // one round of the top_p walk, sorted
  float red_f[32];
  unsigned long long prefix;  // radix select result
  unsigned int remaining;     // radix select rank still to find
  unsigned int count;         // gather cursor
  int flag;                   // thread 0's decision, broadcast
  double before, target;
  int crossing;
  int64_t last_id;
};

/// The k-th (1-based) of the keys key(i) for i in [0, n) with valid(i), in ascending order when
/// kAscending else descending, by 8-bit digits from the top (kBits wide keys).
template <int kBits, bool kAscending, class Key, class Valid>
__device__ unsigned long long radix_select(int64_t n, unsigned long long k, Key key, Valid valid,
                                           RowShared& s) {
  unsigned long long prefix = 0, mask = 0;
  if (threadIdx.x == 0) s.remaining = static_cast<unsigned int>(k);
  for (int shift = kBits - 8; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s.hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      if (!valid(i)) continue;
      const unsigned long long v = key(i);
      if ((v & mask) == prefix) atomicAdd(&s.hist[(v >> shift) & 0xFF], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int before = 0;
      for (int t = 0; t < 256; ++t) {
        const int b = kAscending ? t : 255 - t;
        if (before + s.hist[b] >= s.remaining) {
          s.remaining -= before;
          s.prefix = prefix | (static_cast<unsigned long long>(b) << shift);
          break;
        }
        before += s.hist[b];
      }
    }
    __syncthreads();
    prefix = s.prefix;
    mask |= 0xFFull << shift;
  }
  return prefix;
}

/// Bitonic sort of s.keys[0, kRound) ascending: each thread orders one pair a step.
__device__ void sort_keys(RowShared& s) {
  for (int size = 2; size <= kRound; size *= 2)
    for (int stride = size / 2; stride > 0; stride /= 2) {
      __syncthreads();
      const int t = threadIdx.x;
      const int i = (t / stride) * 2 * stride + t % stride, j = i + stride;
      const bool up = (i & size) == 0;
      const unsigned long long a = s.keys[i], b = s.keys[j];
      if ((a > b) == up) {
        s.keys[i] = b;
        s.keys[j] = a;
      }
    }
  __syncthreads();
}

/// Zeroes w: [n] outside the top_p nucleus (the reference's nucleus()).
__device__ void nucleus(float* w, int64_t n, float top_p, RowShared& s) {
  for (int b = threadIdx.x; b < 256; b += blockDim.x) s.mass[b] = 0.0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (w[i] > 0.0f) atomicAdd(&s.mass[float_bits(w[i]) >> 23], static_cast<double>(w[i]));
  __syncthreads();
  if (threadIdx.x == 0) {
    const NucleusCrossing start = nucleus_crossing(s.mass, top_p);
    s.before = start.before;
    s.target = start.target;
    s.crossing = start.crossing;
    s.last_id = -1;
    s.flag = 0;  // 1: the walk is done
  }
  __syncthreads();
  const int crossing = s.crossing;
  const auto in_bucket = [&](int64_t i) {
    return w[i] > 0.0f && static_cast<int>(float_bits(w[i]) >> 23) == crossing;
  };
  const auto key = [&](int64_t i) { return static_cast<unsigned long long>(nucleus_key(w[i], i)); };
  // Rounds of up to kRound candidates in walk order: those with a key above `low`. A row
  // whose crossing bucket holds most of a large vocabulary (a nearly flat distribution) takes
  // width / kRound rounds of ~10 passes each: the slow case (~milliseconds a row).
  bool any_low = false;
  unsigned long long low = 0;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  unsigned int mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mine += in_bucket(i) ? 1u : 0u;
  atomicAdd(&s.count, mine);
  __syncthreads();
  unsigned int left = s.count;
  while (left > 0) {
    const auto above = [&](int64_t i) { return in_bucket(i) && (!any_low || key(i) > low); };
    const unsigned int take = left < kRound ? left : kRound;
    unsigned long long high = ~0ull;
    if (take < left) high = radix_select<64, true>(n, take, key, above, s);
    __syncthreads();
    if (threadIdx.x == 0) s.count = 0;
    s.keys[threadIdx.x] = s.keys[threadIdx.x + kThreads] = ~0ull;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      if (above(i) && key(i) <= high) s.keys[atomicAdd(&s.count, 1u)] = key(i);
    sort_keys(s);
    if (threadIdx.x == 0) {
      for (unsigned int t = 0; t < take; ++t) {
        if (s.before >= s.target) {
          s.flag = 1;
          break;
        }
        const unsigned long long k = s.keys[t];
        s.before += bits_float(~static_cast<uint32_t>(k >> 32));  // the key's weight
        s.last_id = static_cast<uint32_t>(k);
      }
    }
    __syncthreads();
    if (s.flag) break;
    left -= take;
    any_low = true;
    low = s.keys[take - 1];
    __syncthreads();
  }
  const int64_t last_id = s.last_id;
  if (last_id < 0) return;  // no candidate: everything stays
  const float last_w = w[last_id];
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (!in_nucleus(w[i], i, last_w, last_id)) w[i] = 0.0f;
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 1)
    sample_rows_kernel(float* __restrict__ x, int64_t width,
                       const SampleRowParams* __restrict__ params, LogitEdit* __restrict__ edits,
                       int32_t* __restrict__ ids) {
  extern __shared__ double dynamic[];  // per draw block: double sum, then int32 last
  __shared__ RowShared s;
  const SampleRowParams p = params[blockIdx.x];
  float* row = x + static_cast<int64_t>(blockIdx.x) * width;
  if (p.mode == SampleRowParams::kSkip) {
    if (threadIdx.x == 0) ids[blockIdx.x] = kSampleSkipped;
    return;
  }
  float mx = -INFINITY;
  int bad = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = row[i];
    bad |= !isfinite(v);
    mx = fmaxf(mx, v);
  }
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) ids[blockIdx.x] = kSampleNonFinite;
    return;
  }
  if (p.edit_count > 0) {
    // The logits processing, each edited logit kept in its edit: a processed NaN or +inf, or
    // every logit -inf, puts the row back as it was for the host sampler to report.
    LogitEdit* e = edits + p.edit_begin;
    bad = 0;
    for (int k = threadIdx.x; k < p.edit_count; k += blockDim.x) {
      const float raw = row[e[k].token];
      const float l = apply_edit(raw, e[k]);
      e[k].raw = raw;
      row[e[k].token] = l;
      bad |= isnan(l) || l == INFINITY;
    }
    bad = __syncthreads_or(bad);
    mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < width && !bad; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = block_reduce<true>(mx, s.red_f);
    if (bad || mx == -INFINITY) {
      for (int k = threadIdx.x; k < p.edit_count; k += blockDim.x) row[e[k].token] = e[k].raw;
      if (threadIdx.x == 0) ids[blockIdx.x] = kSampleNonFinite;
      return;
    }
  }
  mx = block_reduce<true>(mx, s.red_f);
  if (p.mode == SampleRowParams::kGreedy) {
    if (threadIdx.x == 0) s.last_id = width;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
      if (row[i] == mx) {
        atomicMin(reinterpret_cast<unsigned long long*>(&s.last_id),
                  static_cast<unsigned long long>(i));
        break;
      }
    __syncthreads();
    if (threadIdx.x == 0) ids[blockIdx.x] = static_cast<int32_t>(s.last_id);
    return;
  }
  float threshold = -INFINITY;
  if (p.top_k > 0 && p.top_k < width) {
    const auto key = [&](int64_t i) { return static_cast<unsigned long long>(order_key(row[i])); };
    const auto all = [](int64_t) { return true; };
    threshold = from_order_key(static_cast<uint32_t>(
        radix_select<32, false>(width, static_cast<unsigned long long>(p.top_k), key, all, s)));
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    row[i] = survivor_weight(row[i], mx, p.inv_temperature, threshold, p.min_p);
  __syncthreads();
  if (p.top_p < 1.0f) nucleus(row, width, p.top_p, s);
  // The draw: one thread per block of kSampleBlock tokens sums it as the reference does.
  const int64_t blocks = (width + kSampleBlock - 1) / kSampleBlock;
  double* block_total = dynamic;
  int32_t* block_last = reinterpret_cast<int32_t*>(block_total + blocks);
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    const float* w = row + b * kSampleBlock;
    const int64_t len = min(kSampleBlock, width - b * kSampleBlock);
    const float sum = block_sum(w, len);
    int32_t last = -1;
    for (int64_t t = len - 1; t >= 0; --t)
      if (w[t] > 0.0f) {
        last = static_cast<int32_t>(b * kSampleBlock + t);
        break;
      }
    block_total[b] = static_cast<double>(sum);
    block_last[b] = last;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += block_total[b];
  const double target = p.u * total;
  double acc = 0.0;
  int32_t last = -1;
  for (int64_t b = 0; b < blocks; ++b) {
    if (acc + block_total[b] <= target) {
      acc += block_total[b];
      if (block_last[b] >= 0) last = block_last[b];
      continue;
    }
    const int64_t end = min(width, (b + 1) * kSampleBlock);
    for (int64_t i = b * kSampleBlock; i < end; ++i) {
      if (row[i] <= 0.0f) continue;
      acc += row[i];
      last = static_cast<int32_t>(i);
      if (target < acc) {
        ids[blockIdx.x] = last;
        return;
      }
    }
  }
  ids[blockIdx.x] = last;
}

}  // namespace

void sample_rows(float* x, int64_t rows, int64_t width, const SampleRowParams* params,
                 LogitEdit* edits, int32_t* ids, cudaStream_t stream) {
  if (width < 1 || width >= (int64_t{1} << 28))
    throw std::invalid_argument("cuda sample_rows: width " + std::to_string(width) +
                                " outside [1, 2^28)");
  if (rows == 0) return;
  const int64_t blocks = (width + kSampleBlock - 1) / kSampleBlock;
  const size_t dynamic = static_cast<size_t>(blocks) * (sizeof(double) + sizeof(int32_t));
  if (dynamic + sizeof(RowShared) > 48 * 1024) {  // past the default: opt in (per device)
    int device = 0, optin = 0;
    OCTET_CUDA_CHECK(cudaGetDevice(&device));
    OCTET_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (dynamic + sizeof(RowShared) > static_cast<size_t>(optin))
      throw std::invalid_argument("cuda sample_rows: width " + std::to_string(width) +
                                  " needs " + std::to_string(dynamic + sizeof(RowShared)) +
                                  " bytes of shared memory, more than the device's " +
                                  std::to_string(optin));
    OCTET_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(dynamic)));
  }
  sample_rows_kernel<<<static_cast<unsigned>(rows), kThreads, dynamic, stream>>>(x, width, params,
                                                                               edits, ids);
  OCTET_CUDA_CHECK_LAUNCH();
}

}  // namespace octet::cuda_kernels
