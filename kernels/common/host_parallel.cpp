#include "kernels/common/host_parallel.h"

namespace octet {

void host_parallel_for(int64_t n, bool parallel, const std::function<void(int64_t)>& body) {
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace octet
