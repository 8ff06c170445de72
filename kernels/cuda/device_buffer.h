// Owned device memory for the CUDA backend's scratch (GEMM part sums, attention partials).
// Included by .cu files only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <new>

#include "kernels/cuda/cuda_check.h"

namespace octet::cuda_kernels {

/// `bytes` of device memory on `device`, freed (on that device, the caller's current device
/// restored) with its last owner. Throws std::bad_alloc when the device is full; aborts
/// (OCTET_CUDA_CHECK) on any other error.
inline std::shared_ptr<void> device_buffer(int device, size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it
    throw std::bad_alloc();
  }
  OCTET_CUDA_CHECK(err);
  return std::shared_ptr<void>(p, [device](void* q) {
    int current = device;
    const bool known = cudaGetDevice(&current) == cudaSuccess;
    cudaSetDevice(device);
    cudaFree(q);
    if (known) cudaSetDevice(current);
  });
}

/// device_buffer on the calling thread's current device.
inline std::shared_ptr<void> device_buffer(size_t bytes) {
  int device = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&device));
  return device_buffer(device, bytes);
}

}  // namespace octet::cuda_kernels
