#pragma once
// CpuBackend: the Backend (kernels/backend.h) on the host CPU. It runs the kernels of this folder
// in the order the recipe ran them before the seam (bit-identical results) and owns every
// OpenMP region of a forward pass. Buffers are host memory (huge pages when >= 2 MiB), so
// upload/download are memcpy and synchronize() returns at once.
#include <memory>

#include "kernels/backend.h"

namespace octet {

/// A new CPU backend. Threads: OpenMP's (OMP_NUM_THREADS).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace octet
