#pragma once
// Fast causal grouped-query attention for one query token, same contract as ref::attention
// (kernels/cpu/ops_ref.h): q: [num_heads, head_dim]; k, v: [num_ctx, num_kv_heads, head_dim];
// out: [num_heads, head_dim]; softmax and weighted sum in FP32. AVX2+FMA dot products and
// accumulation when the CPU has them; query heads spread over OpenMP threads when the work is
// large enough (inside an enclosing parallel region it runs on the calling thread).
// Agreement with ref::attention: FP32 summation order only (tested in tests/kernels).
#include <cstdint>

namespace octet::cpu {

void attention(const float* q, const float* k, const float* v, float* out, int64_t num_heads,
               int64_t num_kv_heads, int64_t head_dim, int64_t num_ctx, float scale);

}  // namespace octet::cpu
