#pragma once
// The KV cache budget (docs/cuda.md "Memory"). --kv-cache-memory-bytes (vLLM's name) or
// --num-kv-blocks fix it; else --gpu-memory-utilization F (vLLM's meaning, default 0.9 on a
// device) does, by this rule on a device (CUDA), per rank:
//
//   cap       = floor(F x total)                     total: the device's memory
//   KV budget = cap - context/other - weights - workspace - activations - graph pools
//             = free - (total - cap) - activations - graph pools
//
// where free is measured (cudaMemGetInfo) after the weights are loaded and the workspace is
// reserved (Backend::reserve_workspace: GEMM scratch, attention partials and plan, sized for
// --max-num-batched-tokens, --max-num-seqs, --max-model-len and the largest graph; no op
// allocates scratch after it), so context/other = total - free - weights - workspace is
// measured too: the CUDA context, cuBLASLt's workspace, NCCL's buffers, allocation rounding
// and other processes. The activations and the graph pools (estimate_graph_memory) are
// allocated after the KV pool, so they are subtracted ahead. Every part octet will hold then
// sums to at most cap, and total - cap stays free whatever other processes held at start.
// vLLM: requested = F x total, refused when more than the free memory at start, and KV =
// requested - octet's own non-KV memory (weights, peak activations, non-torch memory
// measured by profiling); it does not subtract what other processes held at start, octet
// does (vLLM's earlier rule), so octet's pool never needs memory another process holds.
// On the CPU (no device memory query): F x the host memory available when loading began -
// weights - activations (kv_budget_bytes). --enforce-eager captures no graphs: no pool.
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/backend.h"

namespace octet {

class LlamaModel;

/// Device memory the driver keeps for one instantiated decode graph (cudaGraphExec_t: kernel
/// node parameters and launch descriptors) on one rank, an estimate: a Llama decode step has
/// about 20 kernel nodes per layer (~650 for 32 layers, more with cuBLASLt's own kernels) and
/// NVIDIA documents no per-node figure; 4 MiB is a bound well above a few KiB per node, to be
/// replaced by a cudaMemGetInfo measurement on the first GPU run.
inline constexpr int64_t kGraphExecBytesEstimate = int64_t{4} << 20;

/// One rank's decode graph set: what engine/model_runner.h and the CUDA backend allocate for
/// it beyond the reserved workspace (kernels/backend.h WorkspaceShape::max_graph_seqs covers the
/// graphs' GEMM scratch and attention partials, shared with eager calls).
struct GraphMemoryShape {
  std::vector<int64_t> sizes;        // captured batch sizes, ascending; empty: no graphs
  int64_t activation_bytes = 0;      // activations for sizes.back() tokens and logits rows
  int64_t max_model_len = 0;         // tokens
  int64_t block_size = 0;            // tokens per KV block
  int64_t num_windows = 1;           // distinct sliding windows of the layers (full = one)
};

/// The estimate, in bytes, for one rank. With P(p) = p * ceil(W / 512) decode partitions for
/// p sequences, W = ceil(max_model_len / block_size) * block_size:
///   activations = activation_bytes (one set, for the largest size: the runner's graph_act)
///   batch       = 44 * p_max + 8 + 4 * p_max * W / block_size (the graph batch arrays)
///   attention   = sum_p num_windows * 4 * (2 + 5 * P(p) + 3 * p)   (each graph's plans)
///   graph_exec  = sizes.size() * kGraphExecBytesEstimate
/// The GEMM scratch and attention partials are the workspace's (one buffer each for every
/// graph and eager call), not counted here.
struct GraphMemoryReserve {
  int64_t activations = 0;
  int64_t batch = 0;
  int64_t attention = 0;
  int64_t graph_exec = 0;
  int64_t total() const { return activations + batch + attention + graph_exec; }
};

/// The decode batch sizes the engine captures graphs for, which the reserve covers: none with
/// --enforce-eager (enforce_eager true) or on a backend without graphs (the CPU), else
/// decode_graph_sizes(max_num_seqs) (engine/model_runner.h: vLLM's 1, 2, 4, 8, 16, ... ladder).
std::vector<int64_t> captured_graph_sizes(bool enforce_eager, bool backend_supports_graphs,
                                          int64_t max_num_seqs);

/// The formula above; all zero when shape.sizes is empty. Throws std::invalid_argument for
/// non-positive max_model_len or block_size when sizes is not empty.
GraphMemoryReserve estimate_graph_memory(const GraphMemoryShape& shape);

/// One rank's shape for `model` (its windows) with graphs of `sizes` (decode_graph_sizes(
/// max_num_seqs), or empty) over max_model_len / block_size; activations measured by
/// allocating them once on the model's backend.
GraphMemoryShape graph_memory_shape(const LlamaModel& model, std::vector<int64_t> sizes,
                                    int64_t max_model_len, int64_t block_size);

/// Bytes of one rank's activations for max_tokens tokens and max_rows logits rows, measured
/// by allocating them once (LlamaModel::new_activations).
int64_t activation_bytes(const LlamaModel& model, int64_t max_tokens, int64_t max_rows);

/// What Backend::reserve_workspace sizes one rank of `model` for: the scheduler's limits,
/// max_model_len / block_size, this rank's heads, every FP8 linear (q, k, v, o, gate, up, down
/// of each layer, then lm_head: out and in features, k parts) and the largest decode graph
/// (max_graph_seqs; 0 without graphs).
WorkspaceShape workspace_shape(const LlamaModel& model, int64_t max_num_batched_tokens,
                               int64_t max_num_seqs, int64_t max_model_len, int64_t block_size,
                               int64_t max_graph_seqs);

/// One rank's device memory at start-up, bytes: measured after the weights are loaded and the
/// workspace reserved, with the parts still to come.
struct DeviceMemoryParts {
  int64_t total_bytes = 0;           // the device's memory (Backend::memory_info)
  int64_t free_bytes = 0;            // free now (Backend::memory_info)
  double gpu_memory_utilization = 0; // F in (0, 1]
  int64_t weights_bytes = 0;         // allocated: inside total - free
  WorkspaceBytes workspace;          // allocated (reserve_workspace): inside total - free
  int64_t activation_bytes = 0;      // to allocate: the runner's activations
  int64_t graph_pool_bytes = 0;      // to allocate: estimate_graph_memory(...).total(); 0 eager
};

/// The rule of the file comment for one rank.
struct DeviceMemoryBudget {
  int64_t cap_bytes = 0;            // floor(F x total)
  int64_t context_other_bytes = 0;  // total - free - weights - workspace (>= 0)
  int64_t kv_budget_bytes = 0;      // free - (total - cap) - activations - graph pools; < 0:
                                    // nothing left (the caller reports it)
};
DeviceMemoryBudget device_kv_budget(const DeviceMemoryParts& parts);

/// What --gpu-memory-utilization's budget is computed from on the CPU (bytes).
struct KVBudgetInputs {
  int64_t device_memory_bytes = 0;     // the memory the fraction is of
  double gpu_memory_utilization = 0;   // in (0, 1]
  int64_t weights_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t graph_reserve_bytes = 0;     // estimate_graph_memory's totals; 0 with --enforce-eager
};

/// floor(gpu_memory_utilization * device_memory_bytes) - weights - activations - graph
/// reserve: the KV budget in bytes, negative when nothing is left (the caller reports it).
int64_t kv_budget_bytes(const KVBudgetInputs& in);

}  // namespace octet
