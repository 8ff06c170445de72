// Launcher of Backend::sample_rows on CUDA (sampling.cu): one block per row computes the token
// kernels/common/sampling.h defines, the same as the CPU reference (kernels/cpu/sample_rows.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/sampling.h"

namespace octet::cuda_kernels {

/// ids[r] for row r of x: [rows, width] with params[r] and its edits (device memory; null when
/// no row has any). Rows sampled may be overwritten (processed logits, survivor weights); rows
/// skipped or reported (kSampleNonFinite) are left as they were. Throws
/// std::invalid_argument when width is outside [1, 2^28) (the exact FP64 bucket sums need
/// fewer than 2^29 tokens) or its per-block sums pass the device's shared memory (12 bytes per
/// 256 tokens: ~4.7M tokens on an H100).
void sample_rows(float* x, int64_t rows, int64_t width, const SampleRowParams* params,
                 LogitEdit* edits, int32_t* ids, cudaStream_t stream);

}  // namespace octet::cuda_kernels
