// FP8 conversion on the GPU: fp32 <-> E4M3/E5M2 with cuda_fp8.h's intrinsics (__NV_SATFINITE,
// round to nearest even), the device twin of the CPU conversions (cpu/fp8.h). On sm_89+ they compile to the
// hardware cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32; on sm_80 to cuda_fp8.h's software path.
// Host-callable; no CUDA types here, so any host code may include this header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"

namespace octet {

/// Encodes src_dev [n] fp32 into dst_dev [n] fp8 codes of `format` on the GPU; same results as
/// octet::fp8_encode. Both pointers are device memory of the current device, any alignment,
/// not overlapping. stream: a cudaStream_t, or nullptr for the default stream. Asynchronous:
/// returns once the kernel is queued. n == 0 launches nothing.
/// Returns the cudaError_t of the launch as an int: 0 (cudaSuccess) or the error code.
[[nodiscard]] int fp8_encode_cuda(DType format, const float* src_dev, uint8_t* dst_dev,
                                  size_t n, void* stream);

/// Decodes src_dev [n] fp8 codes into dst_dev [n] fp32 on the GPU, exactly; NaN codes give
/// 0x7FFFFFFF, E5M2 inf codes +-inf (as octet::fp8_decode). Pointers, stream and return value as
/// for fp8_encode_cuda.
[[nodiscard]] int fp8_decode_cuda(DType format, const uint8_t* src_dev, float* dst_dev,
                                  size_t n, void* stream);

}  // namespace octet
