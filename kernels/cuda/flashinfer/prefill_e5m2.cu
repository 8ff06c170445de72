// FlashInfer prefill kernels over a e5m2 cache (nv_bfloat16 queries; prefill_kernels.cuh), one TU per
// cache type so they compile in parallel.
#include "kernels/cuda/flashinfer/prefill_kernels.cuh"

namespace octet::cuda_kernels::flashinfer_detail {

bool launch_prefill_e5m2(const FlashInferPrefill& a, cudaStream_t stream) {
  return launch_prefill_any<nv_bfloat16, __nv_fp8_e5m2>(a, stream);
}

}  // namespace octet::cuda_kernels::flashinfer_detail
