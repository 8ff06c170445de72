// DeviceScope: makes a CUDA device current for a scope and restores the caller's after.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"

namespace octet::cuda_kernels {

/// Makes `device` current for its life and restores the caller's device after (a rank thread
/// may call another rank's backend: kv_cache_setup reserves every rank's workspace).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    known_ = cudaGetDevice(&previous_) == cudaSuccess;
    OCTET_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() {
    if (known_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool known_ = false;
};

}  // namespace octet::cuda_kernels
