// The RoPE rotation of one pair (Su et al. 2021), shared by the rope kernel (elementwise.cu) and
// the fused RoPE + KV-cache write (attention.cu) so both give the same bits. Device code.
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cuda/device_math.h"

namespace octet::cuda_kernels {

/// Rotates the pair i of head xh by angle position * inv_freq and returns its dims in a, b:
/// (2i, 2i + 1) when adjacent (GPT-J), else (i, i + half) (NeoX); half = rot_dim / 2.
__device__ __forceinline__ void rope_rotate_pair(float* xh, int64_t i, int64_t half,
                                                 bool adjacent, float position, float inv_freq,
                                                 int64_t& a, int64_t& b) {
  namespace cm = octet::cuda_math;
  const float angle = cm::mul_rn(position, inv_freq);
  float s, c;
  sincosf(angle, &s, &c);
  a = adjacent ? 2 * i : i;
  b = adjacent ? 2 * i + 1 : i + half;
  const float x0 = xh[a], x1 = xh[b];
  xh[a] = cm::add_rn(cm::mul_rn(x0, c), -cm::mul_rn(x1, s));
  xh[b] = cm::add_rn(cm::mul_rn(x0, s), cm::mul_rn(x1, c));
}

}  // namespace octet::cuda_kernels
