#pragma once
// CudaBackend: the Backend (kernels/backend.h) on one NVIDIA GPU of compute capability >= 8.0.
// One CUDA stream per backend orders every op; buffers are cudaMalloc'd device memory (zeroed);
// download() stages through pinned host memory. GEMMs: cuBLASLt FP8 E4M3 x E4M3 on sm_89+ (FP32
// output, fused scaling epilogue), W8A16 through cuBLASLt BF16 on sm_80/86 (warned at start-up),
// F32 through cuBLASLt, and a tiled CUDA-core kernel where cuBLASLt cannot take a shape or for
// BF16 weights with FP32 activations (gemm.h). Attention: attention.h.
// Plain C++ (no CUDA types), so make_backend (kernels/backend.cpp) includes it from host code.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace octet {

/// Number of CUDA devices the runtime sees; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();

/// Compute capability of device `index` as 10 * major + minor (90 for sm_90); 0 when the
/// device cannot be queried.
int cuda_device_capability(int index);

/// A CUDA backend on device `index`. Throws std::invalid_argument naming the device when it does
/// not exist, cannot be used, or its compute capability is below 8.0.
std::unique_ptr<Backend> make_cuda_backend(int index);

/// The cudaStream_t (as void*) every op of `backend`, a CudaBackend, is queued on: what an
/// NcclCommunicator of that rank enqueues its collectives on. Aborts (OCTET_CHECK) for
/// another backend.
void* cuda_backend_stream(Backend& backend);

/// The CUDA device index of `backend`, a CudaBackend (OCTET_CHECK otherwise).
int cuda_backend_device(const Backend& backend);

// --- Workspace sizing (plain arithmetic: no GPU needed) ----------------------------------------

/// Rows of an FP8 linear whose GEMM scratch reserve_workspace holds at once (W8A16 only: with
/// FP8 tensor cores no scratch is needed): every linear of the shape fits
/// min(kCudaGemmChunkRows, max(1, max_num_batched_tokens, max_num_seqs, max_graph_seqs)) rows
/// in one GEMM over all of k; a call with more rows runs in pieces (graphs, <= 512 rows, never).
inline constexpr int64_t kCudaGemmChunkRows = 512;

/// Floats of GEMM scratch linear_w8a8 (k_groups 1: one GEMM) or linear_w8a8_partials need for
/// m rows of a linear of n outputs, k inputs in k_groups parts: 0 with FP8 tensor cores (the
/// sums go straight to the output), and without them (has_fp8 false: W8A16) the BF16 copies of
/// one part's weight [n, k / k_groups] and activations [m, k / k_groups], 16-byte aligned.
int64_t cuda_gemm_scratch_floats(int64_t m, int64_t n, int64_t k, int64_t k_groups,
                                 bool has_fp8);

/// Floats of GEMM scratch linear_w8a8_multi needs for m rows of merged projections (adjacent
/// FP8 weights, fp8_adjacent) of n stacked outputs on an FP8 device: their sums, m x n.
int64_t cuda_merged_scratch_floats(int64_t m, int64_t n);

/// Floats of GEMM scratch a linear of BF16 weights with k inputs needs for m rows: their
/// activations as BF16, m x k halves rounded up to 16 bytes.
int64_t cuda_bf16_scratch_floats(int64_t m, int64_t k);

/// The largest r <= m with cuda_gemm_scratch_floats(r, ...) <= scratch_floats: the rows of
/// one piece of a call; 0 when not even one row fits.
int64_t cuda_gemm_chunk_rows(int64_t scratch_floats, int64_t m, int64_t n, int64_t k,
                             int64_t k_groups, bool has_fp8);

/// What CudaBackend::reserve_workspace(shape) allocates, by part: GEMM scratch of
/// cuda_gemm_scratch_floats (cuda_merged_scratch_floats for merged groups, FP8 devices only;
/// cuda_bf16_scratch_floats for BF16 weights)
/// at the chunk rows above, maximised over shape.fp8_linears; the
/// attention partials, eager plan and FlashInfer prefill buffers of kernels/cuda/attention.h's
/// attention_workspace (one partials buffer for eager calls and every graph; no prefill buffers
/// unless `flashinfer` (the device runs FlashInfer) and FlashInfer prefill has the head_dim).
WorkspaceBytes cuda_workspace_bytes(const WorkspaceShape& shape, bool has_fp8,
                                    bool flashinfer = true);

}  // namespace octet
