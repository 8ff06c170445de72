#pragma once
// CudaBackend: the Backend (kernels/backend.h) on one NVIDIA GPU of compute capability >= 8.0.
// One CUDA stream per backend orders every op; buffers are cudaMalloc'd device memory (zeroed);
// download() stages through pinned host memory. GEMMs: cuBLASLt FP8 E4M3 x E4M3 on sm_89+ (FP32
// output, fused scaling epilogue), W8A16 through cuBLASLt BF16 on sm_80/86 (warned at start-up),
// F32 through cuBLASLt, and a tiled CUDA-core kernel where cuBLASLt cannot take a shape or for
// BF16 weights with FP32 activations (gemm.h). Attention: attention.h.
// Plain C++ (no CUDA types), so make_backend (kernels/backend.cpp) includes it from host code.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace octet {

/// Number of CUDA devices the runtime sees; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();

/// Compute capability of device `index` as 10 * major + minor (90 for sm_90); 0 when the
/// device cannot be queried.
int cuda_device_capability(int index);

/// A CUDA backend on device `index`. Throws std::invalid_argument naming the device when it does
/// not exist, cannot be used, or its compute capability is below 8.0.
std::unique_ptr<Backend> make_cuda_backend(int index);

/// The cudaStream_t (as void*) every op of `backend`, a CudaBackend, is queued on: what an
/// NcclCommunicator of that rank enqueues its collectives on. Aborts (OCTET_CHECK) for
/// another backend.
void* cuda_backend_stream(Backend& backend);

/// The CUDA device index of `backend`, a CudaBackend (OCTET_CHECK otherwise).
int cuda_backend_device(const Backend& backend);

}  // namespace octet
