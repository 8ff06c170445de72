// FP8 array conversions: the portable scalar loops and the run-time choice of path.
// The AVX2 loops live in fp8_avx2.cpp.
#include "kernels/cpu/fp8.h"

namespace octet {

void fp8_encode_scalar(DType format, const float* src, uint8_t* dst, size_t n) {
  if (format == DType::FP8_E4M3) {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_from_float(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_from_float(src[i]);
  }
}

void fp8_encode_bf16_scalar(DType format, const uint16_t* src, uint8_t* dst, size_t n) {
  if (format == DType::FP8_E4M3) {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_from_bf16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_from_bf16(src[i]);
  }
}

void fp8_encode_fp16_scalar(DType format, const uint16_t* src, uint8_t* dst, size_t n) {
  if (format == DType::FP8_E4M3) {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_from_fp16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_from_fp16(src[i]);
  }
}

void fp8_decode_scalar(DType format, const uint8_t* src, float* dst, size_t n) {
  if (format == DType::FP8_E4M3) {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_float(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_to_float(src[i]);
  }
}

void fp8_encode(DType format, const float* src, uint8_t* dst, size_t n) {
  if (fp8_avx2_available()) {
    fp8_encode_avx2(format, src, dst, n);
  } else {
    fp8_encode_scalar(format, src, dst, n);
  }
}

void fp8_encode_bf16(DType format, const uint16_t* src, uint8_t* dst, size_t n) {
  if (fp8_avx2_available()) {
    fp8_encode_bf16_avx2(format, src, dst, n);
  } else {
    fp8_encode_bf16_scalar(format, src, dst, n);
  }
}

void fp8_encode_fp16(DType format, const uint16_t* src, uint8_t* dst, size_t n) {
  if (fp8_avx2_available()) {
    fp8_encode_fp16_avx2(format, src, dst, n);
  } else {
    fp8_encode_fp16_scalar(format, src, dst, n);
  }
}

void fp8_decode(DType format, const uint8_t* src, float* dst, size_t n) {
  if (fp8_avx2_available()) {
    fp8_decode_avx2(format, src, dst, n);
  } else {
    fp8_decode_scalar(format, src, dst, n);
  }
}

}  // namespace octet
