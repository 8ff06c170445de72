#include "engine/kv_budget.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "models/llama.h"

namespace octet {

namespace {

// Restated from the CUDA headers, which host-only code cannot include; keep them in step:
// positions of one attention partition (kernels/cuda/attention.h kPartitionTokens) and ints of
// one decode / merge work item of a graph's plan (kernels/cuda/attention_kernels.cuh).
constexpr int64_t kPartitionTokens = 512;
constexpr int64_t kDecodeItemInts = 5, kMergeItemInts = 3;

}  // namespace

std::vector<int64_t> captured_graph_sizes(bool enforce_eager, bool backend_supports_graphs,
                                          int64_t max_num_seqs) {
  if (enforce_eager || !backend_supports_graphs || max_num_seqs <= 0) return {};
  return decode_graph_sizes(max_num_seqs);
}

GraphMemoryReserve estimate_graph_memory(const GraphMemoryShape& s) {
  GraphMemoryReserve r;
  if (s.sizes.empty()) return r;
  for (const auto& [v, name] : {std::pair{s.max_model_len, "max_model_len"},
                                std::pair{s.block_size, "block_size"}})
    if (v <= 0)
      throw std::invalid_argument(std::string("estimate_graph_memory: ") + name +
                                  " must be positive, got " + std::to_string(v));
  const int64_t width = (s.max_model_len + s.block_size - 1) / s.block_size;  // blocks
  const int64_t cap = width * s.block_size;
  const int64_t partitions = (cap - 1) / kPartitionTokens + 1;  // per sequence
  const int64_t p_max = s.sizes.back();
  r.activations = s.activation_bytes;
  r.batch = 44 * p_max + 8 + 4 * p_max * width;
  const int64_t windows = std::max<int64_t>(s.num_windows, 1);
  for (const int64_t p : s.sizes)
    r.attention += windows * 4 * (2 + kDecodeItemInts * p * partitions + kMergeItemInts * p);
  r.graph_exec = static_cast<int64_t>(s.sizes.size()) * kGraphExecBytesEstimate;
  return r;
}

int64_t activation_bytes(const LlamaModel& model, int64_t max_tokens, int64_t max_rows) {
  const LlamaActivations a = model.new_activations(max_tokens, std::max<int64_t>(max_rows, 1));
  int64_t n = 0;
  for (const Buffer* b : {&a.x, &a.xn, &a.q, &a.k, &a.v, &a.attn, &a.proj, &a.gate, &a.up, &a.qa,
                          &a.a_scale, &a.amax, &a.partials, &a.gathered_partials,
                          &a.reduce_bf16, &a.last, &a.logits, &a.sampled, &a.gathered})
    n += b->bytes();
  return n;
}

GraphMemoryShape graph_memory_shape(const LlamaModel& model, std::vector<int64_t> sizes,
                                    int64_t max_model_len, int64_t block_size) {
  GraphMemoryShape s;
  s.sizes = std::move(sizes);
  std::sort(s.sizes.begin(), s.sizes.end());
  s.max_model_len = max_model_len;
  s.block_size = block_size;
  const std::set<int64_t> windows(model.config().layer_sliding_window.begin(),
                                  model.config().layer_sliding_window.end());
  s.num_windows = std::max<int64_t>(static_cast<int64_t>(windows.size()), 1);
  if (!s.sizes.empty()) s.activation_bytes = activation_bytes(model, s.sizes.back(), s.sizes.back());
  return s;
}

WorkspaceShape workspace_shape(const LlamaModel& model, int64_t max_num_batched_tokens,
                               int64_t max_num_seqs, int64_t max_model_len, int64_t block_size,
                               int64_t max_graph_seqs) {
  WorkspaceShape s;
  s.max_num_batched_tokens = max_num_batched_tokens;
  s.max_num_seqs = max_num_seqs;
  s.max_model_len = max_model_len;
  s.block_size = block_size;
  s.num_heads = model.shard().num_heads;
  s.head_dim = model.config().head_dim;
  s.max_graph_seqs = max_graph_seqs;
  const auto add = [&](const LinearWeight& w) {
    if (w.format == DType::FP8_E4M3)
      s.fp8_linears.push_back({w.out_features, w.in_features, std::max<int64_t>(w.k_groups, 1)});
    if (w.format == DType::BF16)
      s.fp8_linears.push_back({w.out_features, w.in_features, 1, false, /*bf16=*/true});
  };
  // A merged group (upload_linears_merged): one GEMM of their summed rows.
  const auto add_merged = [&](std::initializer_list<const LinearWeight*> group) {
    std::vector<WeightRef> refs;
    int64_t n = 0;
    for (const LinearWeight* lw : group) {
      refs.push_back(lw->ref());
      n += lw->out_features;
    }
    if (fp8_adjacent(refs.data(), static_cast<int>(refs.size())))
      s.fp8_linears.push_back({n, refs[0].k, 1, /*merged=*/true});
  };
  const LlamaWeights& w = model.weights();
  for (const LlamaLayerWeights& l : w.layers) {
    for (const LinearWeight* lw : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                   &l.up_proj, &l.down_proj})
      add(*lw);
    add_merged({&l.q_proj, &l.k_proj, &l.v_proj});
    add_merged({&l.gate_proj, &l.up_proj});
  }
  add(w.lm_head);
  return s;
}

DeviceMemoryBudget device_kv_budget(const DeviceMemoryParts& p) {
  DeviceMemoryBudget b;
  b.cap_bytes = static_cast<int64_t>(
      std::floor(p.gpu_memory_utilization * static_cast<double>(p.total_bytes)));
  b.context_other_bytes =
      std::max<int64_t>(0, p.total_bytes - p.free_bytes - p.weights_bytes - p.workspace.total());
  b.kv_budget_bytes = p.free_bytes - (p.total_bytes - b.cap_bytes) - p.activation_bytes -
                      p.graph_pool_bytes;
  return b;
}

int64_t kv_budget_bytes(const KVBudgetInputs& in) {
  const double usable =
      std::floor(in.gpu_memory_utilization * static_cast<double>(in.device_memory_bytes));
  return static_cast<int64_t>(usable) - in.weights_bytes - in.activation_bytes -
         in.graph_reserve_bytes;
}

}  // namespace octet
