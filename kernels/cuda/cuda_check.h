// Error checks of CUDA runtime and cuBLASLt calls: a failed call is a broken invariant of the
// CUDA backend (an invalid launch, a kernel that trapped, a lost device), so it aborts with the
// call, file and line (OCTET_CHECK), except cudaErrorMemoryAllocation from allocations, which
// the backend turns into std::bad_alloc itself. Included by .cu files only.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "kernels/common/check.h"

#define OCTET_CUDA_CHECK(expr)                                                          \
  do {                                                                                  \
    const cudaError_t octet_cuda_err_ = (expr);                                         \
    OCTET_CHECK(octet_cuda_err_ == cudaSuccess, #expr, ": ",                            \
                cudaGetErrorName(octet_cuda_err_), ": ",                                \
                cudaGetErrorString(octet_cuda_err_));                                   \
  } while (0)

#define OCTET_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                  \
    const cublasStatus_t octet_cublas_st_ = (expr);                                     \
    OCTET_CHECK(octet_cublas_st_ == CUBLAS_STATUS_SUCCESS, #expr, ": cublas status ",   \
                static_cast<int>(octet_cublas_st_));                                    \
  } while (0)

/// Checks the launch just queued (bad configuration, too much shared memory).
#define OCTET_CUDA_CHECK_LAUNCH() OCTET_CUDA_CHECK(cudaGetLastError())
