// FP32 operations rounded once to nearest even, never fused into an FMA, and float bit casts,
// as __host__ __device__ functions: __fmul_rn and friends on the device (which nvcc never
// contracts), plain IEEE operations on the host (built without FMA contraction where it
// matters). The CUDA kernels' math (kernels/cuda/device_math.h) and the sampler's
// (kernels/common/sampling.h) use them, so host and device give the same bits.
// Plain C++ with no CUDA include: under nvcc OCTET_HD is __host__ __device__, elsewhere empty.
#pragma once

#include <cstdint>
#include <cstring>

#if !defined(OCTET_HD)
#if defined(__CUDACC__)
#define OCTET_HD __host__ __device__
#else
#define OCTET_HD
#endif
#endif

namespace octet::rounded {

OCTET_HD inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

OCTET_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

/// a * b, a + b, a - b, a / b rounded to nearest even, never fused with a neighbouring operation.
OCTET_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
OCTET_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
OCTET_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
OCTET_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace octet::rounded
