#include "kernels/common/host_parallel.h"

#include "kernels/cpu/thread_team.h"

namespace octet {

void host_parallel_for(int64_t n, bool parallel, const std::function<void(int64_t)>& body) {
  cpu::parallel_for_each(0, n, body, parallel);
}

}  // namespace octet
