// FlashInfer prefill kernels over a bf16 cache (nv_bfloat16 queries; prefill_kernels.cuh), one TU per
// cache type so they compile in parallel.
#include "kernels/cuda/flashinfer/prefill_kernels.cuh"

namespace octet::cuda_kernels::flashinfer_detail {

bool launch_prefill_bf16(const FlashInferPrefill& a, cudaStream_t stream) {
  return launch_prefill_any<nv_bfloat16, nv_bfloat16>(a, stream);
}

}  // namespace octet::cuda_kernels::flashinfer_detail
