#pragma once
// y = x W^T with W stored as bf16 bits: the "16-bit" path for lm_head and embeddings.
// bf16 widens to FP32 exactly (bits << 16); products and sums in FP32.
#include <cstdint>

namespace octet {

/// y: [m, n] = x: [m, k] . W^T, W: [n, k] bf16 bits row-major. OpenMP over n; AVX2+FMA when
/// the CPU has them (runtime dispatch), scalar otherwise.
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k);

namespace ref {
/// Plain reference: widen each weight, FP32 dot product in index order.
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k);
}  // namespace ref

}  // namespace octet
