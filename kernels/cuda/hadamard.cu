// Normalized fast Walsh-Hadamard transform of rows (hadamard.h): one block per row (grid-stride
// over rows), the row staged in shared memory, log2(head_dim) butterfly stages separated by
// __syncthreads, then the 1/sqrt(head_dim) multiply on the way back to global memory. Each row
// is computed by its own block alone: batch invariant.
#include "kernels/cuda/hadamard.h"

#include <math.h>

#include <algorithm>

#include "kernels/common/check.h"
#include "kernels/cuda/cuda_check.h"

namespace octet::cuda_kernels {

namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 65535;

__global__ void hadamard_kernel(float* __restrict__ x, int64_t rows, int64_t n, float scale) {
  extern __shared__ float row[];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* xr = x + r * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) row[j] = xr[j];
    __syncthreads();
    for (int64_t len = 1; len < n; len <<= 1) {
      // Pair p: block i = p / len of 2 * len elements, offset p % len: (j, j + len).
      for (int64_t p = threadIdx.x; p < n / 2; p += blockDim.x) {
        const int64_t j = (p / len) * 2 * len + p % len;
        const float a = row[j], b = row[j + len];
        row[j] = __fadd_rn(a, b);
        row[j + len] = __fsub_rn(a, b);
      }
      __syncthreads();
    }
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) xr[j] = __fmul_rn(row[j], scale);
    __syncthreads();  // the next row reuses `row`
  }
}

}  // namespace

void hadamard_rotate(float* x, int64_t rows, int64_t head_dim, cudaStream_t stream) {
  OCTET_CHECK(head_dim > 0 && (head_dim & (head_dim - 1)) == 0 && head_dim <= 8192,
              "cuda hadamard_rotate: head_dim ", head_dim, " is not a power of two in [1, 8192]");
  OCTET_CHECK(rows >= 0, "cuda hadamard_rotate: rows ", rows);
  if (rows == 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const unsigned blocks = static_cast<unsigned>(std::min(rows, kMaxBlocks));
  hadamard_kernel<<<blocks, kThreads, static_cast<size_t>(head_dim) * sizeof(float), stream>>>(
      x, rows, head_dim, scale);
  OCTET_CUDA_CHECK_LAUNCH();
}

}  // namespace octet::cuda_kernels
