// Launcher of the normalized Walsh-Hadamard kernel of the CUDA backend (hadamard.cu):
// Backend::hadamard_rotate (kernels/backend.h). x is device memory; the call queues the kernel
// on `stream` and returns.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace octet::cuda_kernels {

/// x[r, :] = H x[r, :] / sqrt(head_dim) for r < rows, in place; x: [rows, head_dim] FP32;
/// head_dim a power of two (OCTET_CHECK). The same butterfly order and final scale as the CPU's
/// kernels/cpu/hadamard.h, so the two agree bit for bit (adds, subtracts, one multiply).
void hadamard_rotate(float* x, int64_t rows, int64_t head_dim, cudaStream_t stream);

}  // namespace octet::cuda_kernels
