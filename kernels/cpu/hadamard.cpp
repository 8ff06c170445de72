// Normalized fast Walsh-Hadamard transform of rows (see hadamard.h).
#include "kernels/cpu/hadamard.h"

#include <cmath>

#include "kernels/common/check.h"
#include "kernels/cpu/thread_team.h"

namespace octet::cpu {

void hadamard_row(float* x, int64_t n) {
  OCTET_CHECK(n > 0 && (n & (n - 1)) == 0, "hadamard_rotate: head_dim ", n,
              " is not a power of two");
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t j = 0; j < n; ++j) x[j] *= scale;
}

void hadamard_rows(float* x, int64_t rows, int64_t n) {
  OCTET_CHECK(rows >= 0, "hadamard_rotate: rows ", rows);
  OCTET_CHECK(n > 0 && (n & (n - 1)) == 0, "hadamard_rotate: head_dim ", n,
              " is not a power of two");
  parallel_for_each(0, rows, [&](int64_t r) { hadamard_row(x + r * n, n); }, rows * n >= 65536);
}

}  // namespace octet::cpu
