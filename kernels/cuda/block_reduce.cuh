// Warp and block reductions (sum, max) in FP32 for the row kernels. The order of the adds is
// fixed by the block size and the row length alone, never by the batch, so a row's result does
// not depend on the other rows (batch invariance). Device code; included by .cu files only.
#pragma once

#include <math.h>

namespace octet::cuda_kernels {

constexpr int kWarpSize = 32;

/// Sum over the 32 lanes by a butterfly: every lane returns the same total.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    x = __fadd_rn(x, __shfl_xor_sync(0xFFFFFFFFu, x, offset));
  return x;
}

/// fmaxf over the 32 lanes (NaN ignored, as fmaxf); every lane returns it.
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, offset));
  return x;
}

/// Block-wide sum (kMax: fmaxf, for values >= 0) of one value per thread; every thread returns the result.
/// blockDim.x must be a multiple of 32 and at most 1024; `shared` holds 32 floats. Contains
/// __syncthreads(): every thread of the block must call it.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float x, float* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  x = kMax ? warp_max(x) : warp_sum(x);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float r = lane < warps ? shared[lane] : 0.0f;
  r = kMax ? warp_max(r) : warp_sum(r);
  return r;
}

}  // namespace octet::cuda_kernels
