#pragma once
// Host-side parallel loops for load-time work outside a Backend (dequantizing checkpoint
// tensors), so that models/ holds no OpenMP pragma. Defined in kernels/common/host_parallel.cpp
// (OpenMP).
#include <cstdint>
#include <functional>

namespace octet {

/// Calls body(i) for every i in [0, n), spread over the OpenMP threads when parallel is true
/// (static schedule), else in order on the calling thread. Iterations must be independent.
void host_parallel_for(int64_t n, bool parallel, const std::function<void(int64_t)>& body);

}  // namespace octet
