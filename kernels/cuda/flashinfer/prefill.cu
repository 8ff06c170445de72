// FlashInfer prefill (flashinfer_prefill.h): the cache-type dispatch and octet's conversions
// around it (q x k_scale to 16 bits, the 16-bit output x v_scale back to FP32).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flashinfer/prefill_kernels.cuh"

namespace octet::cuda_kernels {

namespace {

template <typename T>
__device__ __forceinline__ T to16(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 to16<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ half to16<half>(float x) {
  return __float2half_rn(x);
}

// Elements of prefill rows of q: q x k_scale of its head's KV head (1 without), rounded to T
// (the kernel reads no other row).
template <typename T>
__global__ void q_to16_kernel(const float* __restrict__ q, const float* __restrict__ k_scale,
                              const uint8_t* __restrict__ row_is_prefill, int64_t total,
                              int64_t num_heads, int64_t group, int64_t head_dim,
                              T* __restrict__ q16) {
  const int64_t row_elems = num_heads * head_dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!row_is_prefill[i / row_elems]) continue;
    const int64_t h = (i / head_dim) % num_heads;
    const float s = k_scale != nullptr ? k_scale[h / group] : 1.0f;
    q16[i] = to16<T>(q[i] * s);
  }
}

// Elements of prefill rows: the 16-bit output x v_scale of its KV head, to FP32.
template <typename T>
__global__ void out_from16_kernel(const T* __restrict__ o16, const float* __restrict__ v_scale,
                                  const uint8_t* __restrict__ row_is_prefill, int64_t total,
                                  int64_t num_heads, int64_t group, int64_t head_dim,
                                  float* __restrict__ out) {
  const int64_t row_elems = num_heads * head_dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!row_is_prefill[i / row_elems]) continue;
    const int64_t h = (i / head_dim) % num_heads;
    const float s = v_scale != nullptr ? v_scale[h / group] : 1.0f;
    out[i] = static_cast<float>(o16[i]) * s;
  }
}

template <typename T>
void convert_and_run(const FlashInferPrefill& a, bool (*launch)(const FlashInferPrefill&,
                                                                cudaStream_t),
                     cudaStream_t stream) {
  const int64_t total = a.rows * a.num_heads * a.head_dim, group = a.num_heads / a.num_kv_heads;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 8192));
  const bool fp8 = dtype_is_fp8(a.dtype);
  q_to16_kernel<T><<<blocks, 256, 0, stream>>>(a.q, fp8 ? a.k_scale : nullptr, a.row_is_prefill,
                                               total, a.num_heads, group, a.head_dim,
                                               static_cast<T*>(a.q16));
  OCTET_CUDA_CHECK_LAUNCH();
  OCTET_CHECK(launch(a, stream), "flashinfer prefill: no instantiation for head_dim ",
              a.head_dim);
  out_from16_kernel<T><<<blocks, 256, 0, stream>>>(
      static_cast<const T*>(a.o16), fp8 ? a.v_scale : nullptr, a.row_is_prefill, total,
      a.num_heads, group, a.head_dim, a.out);
  OCTET_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool flashinfer_prefill_supported(DType dtype, int64_t head_dim) {
  const bool type = dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::FP8_E4M3 ||
                    dtype == DType::FP8_E5M2;
  return type && (head_dim == 64 || head_dim == 128);
}

void flashinfer_prefill(const FlashInferPrefill& a, cudaStream_t stream) {
  OCTET_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
                  flashinfer_prefill_supported(a.dtype, a.head_dim),
              "flashinfer prefill: no kernel for ", dtype_name(a.dtype), " head_dim ", a.head_dim);
  OCTET_CHECK(a.rows > 0 && a.num_items > 0 && a.num_requests > 0 && a.num_items < (1 << 30),
              "flashinfer prefill: ", a.rows, " rows, ", a.num_items, " items");
  using namespace flashinfer_detail;
  switch (a.dtype) {
    case DType::BF16: return convert_and_run<__nv_bfloat16>(a, launch_prefill_bf16, stream);
    case DType::F16: return convert_and_run<half>(a, launch_prefill_f16, stream);
    case DType::FP8_E4M3: return convert_and_run<__nv_bfloat16>(a, launch_prefill_e4m3, stream);
    case DType::FP8_E5M2: return convert_and_run<__nv_bfloat16>(a, launch_prefill_e5m2, stream);
    default: break;
  }
}

}  // namespace octet::cuda_kernels
