// FlashInfer decode (flashinfer_decode.h): availability, the cache-type dispatch and octet's
// merge of the items' partial states.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/flashinfer/decode_kernels.cuh"

namespace octet::cuda_kernels {

namespace {

// Row r, head h (block (r, h), 32 x 4 threads over head_dim): the items of r merged in chunk
// order. FlashInfer's partials are normalised outputs with log2-domain log-sum-exps: weight
// 2^(lse_i - max), empty chunks (lse -inf) skipped; v_scale of the head's KV head last. Rows
// without items (prefill rows, padding) are left alone.
__global__ void merge_kernel(const float* __restrict__ partial_out,
                             const float* __restrict__ partial_lse,
                             const int32_t* __restrict__ o_indptr,
                             const float* __restrict__ v_scale, int64_t num_heads, int64_t group,
                             int64_t head_dim, int64_t first_row, float* __restrict__ out) {
  const int64_t r = first_row + blockIdx.x, h = blockIdx.y;
  const int32_t first = o_indptr[r], last = o_indptr[r + 1];
  if (first >= last) return;
  float m = -INFINITY;
  for (int32_t i = first; i < last; ++i) m = fmaxf(m, partial_lse[i * num_heads + h]);
  const float vs = v_scale != nullptr ? v_scale[h / group] : 1.0f;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f, sum = 0.0f;
    for (int32_t i = first; i < last; ++i) {
      const float lse = partial_lse[i * num_heads + h];
      if (lse == -INFINITY) continue;
      const float w = exp2f(lse - m);
      sum += w;
      acc = fmaf(w, partial_out[(i * num_heads + h) * head_dim + d], acc);
    }
    out[(r * num_heads + h) * head_dim + d] = sum > 0.0f ? acc / sum * vs : 0.0f;
  }
}

}  // namespace

bool flashinfer_decode_supported(DType dtype, int64_t head_dim, int64_t group_size) {
  const bool type = dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::FP8_E4M3 ||
                    dtype == DType::FP8_E5M2;
  const bool dim = head_dim == 64 || head_dim == 128;
  const bool group = group_size == 1 || group_size == 2 || group_size == 3 || group_size == 4 ||
                     group_size == 8;
  return type && dim && group;
}

bool flashinfer_decode_available() {
  const char* env = std::getenv("OCTET_ATTENTION_BACKEND");
  const std::string choice = env != nullptr ? env : "";
  if (choice == "OCTET") return false;
  if (!choice.empty() && choice != "FLASHINFER")
    throw std::invalid_argument("OCTET_ATTENTION_BACKEND=" + choice +
                                ": expected FLASHINFER (the default where supported) or OCTET");
  int device = 0, major = 0, minor = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&device));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

void flashinfer_decode(const FlashInferDecode& a, cudaStream_t stream) {
  OCTET_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
                  flashinfer_decode_supported(a.dtype, a.head_dim, a.num_heads / a.num_kv_heads),
              "flashinfer decode: no kernel for ", dtype_name(a.dtype), " head_dim ", a.head_dim,
              ", ", a.num_heads, " heads over ", a.num_kv_heads);
  OCTET_CHECK(a.rows > 0 && a.num_items > 0 && a.rows < 65536 * 1024 && a.num_heads < 65536 &&
                  a.item_count != nullptr && a.sm_count > 0,
              "flashinfer decode: ", a.rows, " rows, ", a.num_items, " items");
  using namespace flashinfer_detail;
  bool launched = false;
  switch (a.dtype) {
    case DType::BF16: launched = launch_decode_bf16(a, stream); break;
    case DType::F16: launched = launch_decode_f16(a, stream); break;
    case DType::FP8_E4M3: launched = launch_decode_e4m3(a, stream); break;
    case DType::FP8_E5M2: launched = launch_decode_e5m2(a, stream); break;
    default: break;
  }
  OCTET_CHECK(launched, "flashinfer decode: no instantiation for head_dim ", a.head_dim);
  OCTET_CHECK(a.merge_first_row >= 0 && a.merge_rows > 0 &&
                  a.merge_first_row + a.merge_rows <= a.rows,
              "flashinfer decode: merge rows ", a.merge_first_row, " + ", a.merge_rows, " of ",
              a.rows);
  const dim3 grid(static_cast<unsigned>(a.merge_rows), static_cast<unsigned>(a.num_heads));
  merge_kernel<<<grid, 128, 0, stream>>>(a.partial_out, a.partial_lse, a.o_indptr,
                                         dtype_is_fp8(a.dtype) ? a.v_scale : nullptr,
                                         a.num_heads, a.num_heads / a.num_kv_heads, a.head_dim,
                                         a.merge_first_row, a.out);
  OCTET_CUDA_CHECK_LAUNCH();
}

}  // namespace octet::cuda_kernels
