// FlashInfer decode kernels over a e4m3 cache (decode_kernels.cuh), one TU per cache type so
// they compile in parallel.
#include "kernels/cuda/flashinfer/decode_kernels.cuh"

namespace octet::cuda_kernels::flashinfer_detail {

bool launch_decode_e4m3(const FlashInferDecode& a, cudaStream_t stream) {
  return launch_decode_any<__nv_fp8_e4m3>(a, stream);
}

}  // namespace octet::cuda_kernels::flashinfer_detail
