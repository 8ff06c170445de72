// FlashInfer decode kernels over a bf16 cache (decode_kernels.cuh), one TU per cache type so
// they compile in parallel.
#include "kernels/cuda/flashinfer/decode_kernels.cuh"

namespace octet::cuda_kernels::flashinfer_detail {

bool launch_decode_bf16(const FlashInferDecode& a, cudaStream_t stream) {
  return launch_decode_any<nv_bfloat16>(a, stream);
}

}  // namespace octet::cuda_kernels::flashinfer_detail
