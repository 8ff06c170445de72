#pragma once
// Host-side parallel loops for load-time work outside a Backend (dequantizing checkpoint
// tensors), so that models/ holds no threading code. Defined in kernels/common/host_parallel.cpp
// (the CPU backend's thread team, kernels/cpu/thread_team.h).
#include <cstdint>
#include <functional>

namespace octet {

/// Calls body(i) for every i in [0, n), spread over the CPU thread team when parallel is true
/// (contiguous chunks), else in order on the calling thread. Iterations must be independent.
void host_parallel_for(int64_t n, bool parallel, const std::function<void(int64_t)>& body);

}  // namespace octet
