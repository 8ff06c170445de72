// FlashInfer prefill kernels over a f16 cache (half queries; prefill_kernels.cuh), one TU per
// cache type so they compile in parallel.
#include "kernels/cuda/flashinfer/prefill_kernels.cuh"

namespace octet::cuda_kernels::flashinfer_detail {

bool launch_prefill_f16(const FlashInferPrefill& a, cudaStream_t stream) {
  return launch_prefill_any<half, half>(a, stream);
}

}  // namespace octet::cuda_kernels::flashinfer_detail
