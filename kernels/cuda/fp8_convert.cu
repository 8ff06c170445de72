// FP8 encode/decode kernels (see fp8_convert.h). Each thread converts pairs of elements with the
// x2 intrinsics (one hardware cvt per pair on sm_89+); grid-stride loops cover any n.
#include "kernels/cuda/fp8_convert.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace octet {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr size_t kMaxBlocks = 4096;

// src: [n] fp32, dst: [n] fp8 codes. Scalar loads and byte stores: no alignment assumed.
template <__nv_fp8_interpretation_t kFormat>
__global__ void fp8_encode_kernel(const float* __restrict__ src, uint8_t* __restrict__ dst,
                                  size_t n) {
  const size_t pairs = n / 2;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += stride) {
    const float2 v = make_float2(src[2 * p], src[2 * p + 1]);
    const __nv_fp8x2_storage_t codes = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, kFormat);
    dst[2 * p] = static_cast<uint8_t>(codes & 0xFFu);  // .x in the low byte
    dst[2 * p + 1] = static_cast<uint8_t>(codes >> 8);
  }
  if ((n & 1) != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    dst[n - 1] = __nv_cvt_float_to_fp8(src[n - 1], __NV_SATFINITE, kFormat);
  }
}

// src: [n] fp8 codes, dst: [n] fp32. fp8 -> half is exact, half -> fp32 is exact.
template <__nv_fp8_interpretation_t kFormat>
__global__ void fp8_decode_kernel(const uint8_t* __restrict__ src, float* __restrict__ dst,
                                  size_t n) {
  const size_t pairs = n / 2;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += stride) {
    const __nv_fp8x2_storage_t codes = static_cast<__nv_fp8x2_storage_t>(
        src[2 * p] | (static_cast<unsigned>(src[2 * p + 1]) << 8));
    const float2 v = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(codes, kFormat)));
    dst[2 * p] = v.x;
    dst[2 * p + 1] = v.y;
  }
  if ((n & 1) != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    dst[n - 1] = __half2float(__half(__nv_cvt_fp8_to_halfraw(src[n - 1], kFormat)));
  }
}

unsigned blocks_for(size_t n) {
  const size_t pairs = n / 2 + 1;
  const size_t blocks = (pairs + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

}  // namespace

int fp8_encode_cuda(DType format, const float* src_dev, uint8_t* dst_dev, size_t n,
                    void* stream) {
  if (n == 0) return static_cast<int>(cudaSuccess);
  const auto s = static_cast<cudaStream_t>(stream);
  if (format == DType::FP8_E4M3) {
    fp8_encode_kernel<__NV_E4M3><<<blocks_for(n), kThreadsPerBlock, 0, s>>>(src_dev, dst_dev, n);
  } else {
    fp8_encode_kernel<__NV_E5M2><<<blocks_for(n), kThreadsPerBlock, 0, s>>>(src_dev, dst_dev, n);
  }
  return static_cast<int>(cudaGetLastError());
}

int fp8_decode_cuda(DType format, const uint8_t* src_dev, float* dst_dev, size_t n,
                    void* stream) {
  if (n == 0) return static_cast<int>(cudaSuccess);
  const auto s = static_cast<cudaStream_t>(stream);
  if (format == DType::FP8_E4M3) {
    fp8_decode_kernel<__NV_E4M3><<<blocks_for(n), kThreadsPerBlock, 0, s>>>(src_dev, dst_dev, n);
  } else {
    fp8_decode_kernel<__NV_E5M2><<<blocks_for(n), kThreadsPerBlock, 0, s>>>(src_dev, dst_dev, n);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace octet
