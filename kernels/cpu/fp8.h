// FP8 array conversions on the CPU (the scalar rules are in kernels/common/fp8.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/fp8.h"

namespace octet {

// --- Arrays ---------------------------------------------------------------------------------
// src: [n], dst: [n]; any alignment; src and dst must not overlap. Results equal the scalar
// functions element by element. These pick the AVX2 path at run time when the CPU has
// AVX2+FMA+F16C (x86-64 only), else the portable scalar loop.

/// fp32 [n] -> fp8 codes [n].
void fp8_encode(DType format, const float* src, uint8_t* dst, size_t n);
/// bf16 bits [n] -> fp8 codes [n].
void fp8_encode_bf16(DType format, const uint16_t* src, uint8_t* dst, size_t n);
/// fp16 bits [n] -> fp8 codes [n].
void fp8_encode_fp16(DType format, const uint16_t* src, uint8_t* dst, size_t n);
/// fp8 codes [n] -> fp32 [n].
void fp8_decode(DType format, const uint8_t* src, float* dst, size_t n);

// Explicit paths, for tests and benchmarks. The _avx2 ones abort with a message when
// fp8_avx2_available() is false (no AVX2/FMA/F16C, or not an x86-64 build).
/// True when this build has the AVX2 code and this CPU can run it.
bool fp8_avx2_available();
void fp8_encode_scalar(DType format, const float* src, uint8_t* dst, size_t n);
void fp8_encode_bf16_scalar(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_encode_fp16_scalar(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_decode_scalar(DType format, const uint8_t* src, float* dst, size_t n);
void fp8_encode_avx2(DType format, const float* src, uint8_t* dst, size_t n);
void fp8_encode_bf16_avx2(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_encode_fp16_avx2(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_decode_avx2(DType format, const uint8_t* src, float* dst, size_t n);

}  // namespace octet
