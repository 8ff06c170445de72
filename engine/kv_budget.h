#pragma once
// The KV cache budget from --gpu-memory-utilization (vLLM's meaning: the fraction of the
// device's memory octet may use; default 0.9): what is left after the weights, the
// activations and the CUDA graph pools. The graph pools are not measured (octet captures each
// decode graph at the first step of its size, after the KV pool exists), so they are reserved
// by a conservative estimate per captured batch size (estimate_graph_memory); --enforce-eager
// captures nothing and reserves nothing. --kv-cache-memory-bytes (vLLM's name) replaces the
// whole computation with a fixed budget (engine/kv_cache_setup.h). docs/cuda.md "Memory".
#include <cstdint>
#include <utility>
#include <vector>

namespace octet {

class LlamaModel;

/// Device memory the driver keeps for one instantiated decode graph (cudaGraphExec_t: kernel
/// node parameters and launch descriptors) on one rank, an estimate: a Llama decode step has
/// about 20 kernel nodes per layer (~650 for 32 layers, more with cuBLASLt's own kernels) and
/// NVIDIA documents no per-node figure; 4 MiB is a bound well above a few KiB per node, to be
/// replaced by a cudaMemGetInfo measurement on the first GPU run.
inline constexpr int64_t kGraphExecBytesEstimate = int64_t{4} << 20;

/// One rank's decode graph set, as the CUDA backend allocates it (model_runner.h,
/// kernels/cuda/attention.h GraphAttention, CudaBackend::scratch).
struct GraphMemoryShape {
  std::vector<int64_t> sizes;        // captured batch sizes, ascending; empty: no graphs
  int64_t activation_bytes = 0;      // activations for sizes.back() tokens and logits rows
  int64_t max_model_len = 0;         // tokens
  int64_t block_size = 0;            // tokens per KV block
  int64_t num_heads = 0;             // query heads on this rank
  int64_t head_dim = 0;
  int64_t num_windows = 1;           // distinct sliding windows of the layers (full = one)
  /// (out_features, k_groups) of this rank's FP8 linears in forward order (every layer's
  /// q, k, v, o, gate, up, down, then lm_head); k_groups: the k parts a row-parallel o_proj /
  /// down_proj sums, each into its own slice of the scratch (LinearWeight::k_groups).
  std::vector<std::pair<int64_t, int64_t>> fp8_linears;
};

/// The estimate, in bytes, for one rank. Graphs are captured at the first step of each size,
/// and a capture that needs more scratch than the largest so far allocates a larger buffer
/// while the older graphs keep theirs: with sizes captured in ascending order (a load ramping
/// up, the worst case) every size holds its own attention partials and every new maximum of
/// the GEMM scratch stays allocated. With P(p) = p * ceil(W / 512) decode partitions for p
/// sequences, W = ceil(max_model_len / block_size) * block_size:
///   activations  = activation_bytes (one set, for the largest size)
///   batch        = 44 * p_max + 8 + 4 * p_max * W / block_size (the graph batch arrays)
///   attention    = sum_p [num_windows * 4 * (2 + 5 * P(p) + 3 * p)          (plans)
///                         + 4 * P(p) * num_heads * (head_dim + 2)]         (partials)
///   gemm_scratch = the sum of the running maxima of 4 * g * round_up(p * n, 64) over p
///                  ascending, then (n, g) in fp8_linears' order (each new maximum allocated)
///   graph_exec   = sizes.size() * kGraphExecBytesEstimate
/// The GEMM term is the FP8 (sm_89+) path; W8A16 on sm_80/86 needs more and is not counted.
struct GraphMemoryReserve {
  int64_t activations = 0;
  int64_t batch = 0;
  int64_t attention = 0;
  int64_t gemm_scratch = 0;
  int64_t graph_exec = 0;
  int64_t total() const { return activations + batch + attention + gemm_scratch + graph_exec; }
};

/// The decode batch sizes the engine captures graphs for, which the reserve covers: none with
/// --enforce-eager (enforce_eager true) or on a backend without graphs (the CPU), else
/// decode_graph_sizes(max_num_seqs) (engine/model_runner.h: vLLM's 1, 2, 4, 8, 16, ... ladder).
std::vector<int64_t> captured_graph_sizes(bool enforce_eager, bool backend_supports_graphs,
                                          int64_t max_num_seqs);

/// The formula above; all zero when shape.sizes is empty. Throws std::invalid_argument for
/// non-positive max_model_len, block_size, num_heads or head_dim when sizes is not empty.
GraphMemoryReserve estimate_graph_memory(const GraphMemoryShape& shape);

/// One rank's shape for `model` (its heads, windows and FP8 linears) with graphs of `sizes`
/// (decode_graph_sizes(max_num_seqs), or empty) over max_model_len / block_size; activations
/// measured by allocating them once on the model's backend.
GraphMemoryShape graph_memory_shape(const LlamaModel& model, std::vector<int64_t> sizes,
                                    int64_t max_model_len, int64_t block_size);

/// Bytes of one rank's activations for max_tokens tokens and max_rows logits rows, measured
/// by allocating them once (LlamaModel::new_activations).
int64_t activation_bytes(const LlamaModel& model, int64_t max_tokens, int64_t max_rows);

/// What --gpu-memory-utilization's budget is computed from (bytes, summed over ranks).
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
