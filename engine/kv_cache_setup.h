#pragma once
// Start-up of the paged KV cache from CacheConfig and the loaded model: each layer's dtype
// (kv_cache_dtype, kv_cache_dtype_skip_layers), its FP8 scales and where they came from, and
// how many blocks the budget holds (DESIGN.md "Core types": CacheConfig, KVCacheSpec).
#include <cstdint>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "kernels/backend.h"
#include "models/paged_kv_cache.h"

namespace octet {

struct LoadedModel;
class LlamaModel;
class Tokenizer;

/// The token ids --calculate-kv-scales runs through the model: the built-in calibration text
/// (models/kv_scales.h), then every special token of the vocabulary (chat markers such as
/// <|im_start|>, BOS, EOS), each followed by a short line of text. Plain text never holds
/// special tokens, yet every chat prompt does, and their K/V can be far larger than a word's:
/// calibrated on the text alone, SmolLM2's FP8 scales saturated on its own system-prompt
/// markers and "What is the capital of France?" got a wrong answer. vocab: the model's
/// vocab_size (ids at or above it are skipped).
/// Placeholder specials (<unusedN>, <|reserved_special_token_N|>: "unused" or "reserved" in
/// the text, any case) are skipped, since no prompt holds them (Gemma 3 has 6,242 of its
/// 6,414), and at most kMaxCalibrationSpecialTokens specials are taken, by id.
std::vector<int32_t> kv_calibration_ids(const Tokenizer& tok, int64_t vocab);
inline constexpr int64_t kMaxCalibrationSpecialTokens = 512;

/// Tokens of the start-up clipping check (kv_check_ids): the first kKVCheckTextTokens of the
/// built-in calibration text, then the first kKVCheckSpecialTokens special tokens of the
/// vocabulary (by id: BOS/EOS and the chat markers of SmolLM2's <|im_start|> / <|im_end|> and
/// Llama 3's ids 128000..128009, <|eot_id|> included), each followed by a short line of text.
inline constexpr int64_t kKVCheckTextTokens = 64;
inline constexpr int64_t kKVCheckSpecialTokens = 10;

/// The token ids of the start-up clipping check that setup_kv_cache runs when FP8 layers have
/// loaded (file, checkpoint) or unit scales and no --calculate-kv-scales pass ran: a short
/// kv_calibration_ids (64 + 10 x 8 = 144 tokens for SmolLM2), one short prefill's cost.
std::vector<int32_t> kv_check_ids(const Tokenizer& tok, int64_t vocab);

/// Bytes this process can still allocate and touch on the host: /proc/meminfo's MemAvailable
/// (else the physical memory), lowered to the room left under a cgroup v2 memory.max.
int64_t available_host_memory_bytes();

/// Bytes of every weight buffer of one rank's model (embeddings, norms, linears with their
/// scales and biases, lm_head).
int64_t model_weight_bytes(const LlamaModel& model);

/// Start-up memory figures: on the CPU summed over tensor-parallel ranks (the budget is too);
/// on a device (Backend::memory_info reports its memory) the device_* figures are per rank
/// (the rank with the smallest KV room), engine/kv_budget.h's rule.
struct MemoryFigures {
  int64_t weights_bytes = 0;
  int64_t activation_bytes = 0;     // the runner's activations (max_num_batched_tokens rows)
  int64_t kv_bytes_per_token = 0;   // all layers, K and V (every group holding the token)
  int64_t max_num_seqs_fit_full = 0;  // the same if window layers kept the whole context
  int64_t device_memory_bytes = 0;  // what --gpu-memory-utilization took a fraction of; 0 = unused
  bool graphs_supported = false;    // the backend captures CUDA graphs
  int64_t graph_reserve_bytes = 0;  // engine/kv_budget.h's estimate; 0: no graphs (eager, CPU)
  int64_t num_graph_sizes = 0;      // decode batch sizes the estimate covers
  std::string budget_source;        // how the KV budget was chosen (for the log line)
  int64_t max_num_seqs_fit = 0;     // sequences of max_model_len tokens the KV budget holds
  // A device, per rank (all 0 on the CPU): the device's memory, the cap F x total (0 with an
  // explicit budget), the reserved workspace, what the context and others hold, this rank's
  // KV pool (null block included) and what stays free once everything is allocated.
  bool on_device = false;
  int64_t device_total_bytes = 0;
  int64_t device_cap_bytes = 0;
  WorkspaceBytes workspace;
  int64_t context_other_bytes = 0;
  int64_t kv_pool_bytes = 0;
  int64_t free_left_bytes = 0;
  /// CPU: "memory: weights 9.45 GiB, activations 408.2 MiB, KV 64.0 KiB per token (fp8_e4m3),
  /// KV budget 1.00 GiB (default 1 GiB on the CPU), 2 sequences of 4096 tokens fit in it".
  /// A device, every part: "memory per GPU: total 79.19 GiB, cap 75.23 GiB (0.95); weights
  /// 8.49 GiB, activations 3.36 GiB, GEMM scratch 256.0 MiB, attention partials 1.02 GiB,
  /// attention plan 9.0 MiB, CUDA graphs 140.2 MiB (35 decode sizes, estimate), context/other
  /// 612.0 MiB, KV pool 61.20 GiB, free left 3.96 GiB; KV 128.0 KiB per token (fp8_e4m3), KV
  /// budget 61.20 GiB (...), 3 sequences of 131072 tokens fit in the KV budget" ("CUDA graphs
  /// off (--enforce-eager)" with --enforce-eager).
  std::string line;
};

struct KVCacheSetup {
  std::vector<KVLayerSpec> layers;  // [num_hidden_layers]
  KVCacheLayout layout;             // KV cache groups (hybrid_kv_cache_layout)
  int64_t block_size = 0;           // tokens (the smallest group block size)
  int64_t num_usable_blocks = 0;    // blocks the budget holds; the pool adds the null block
  int64_t bytes_per_block = 0;      // one block of the pool: its slots' pages, K and V
  int64_t budget_bytes = 0;         // num_usable_blocks * bytes_per_block <= the budget
  int64_t max_model_len = 0;        // tokens
  uint64_t cache_salt = 0;          // folds every layer's dtype and scales (prefix-cache key)
  std::vector<std::string> warnings;
  MemoryFigures memory;
  std::string report;               // the start-up table (memory line, budget, one row per layer)
};

/// --kv-cache-dtype of the dynamic per-(token, KV head) FP8 E4M3 cache (vLLM's name): one FP32
/// scale per token and KV head for K and for V, amax / 448 of that row, computed when K/V are
/// written and stored beside the block (KVLayerSpec::per_token_head). No calibration, no
/// scale shared between requests; --kv-scales-path is refused, checkpoint scales ignored.
inline constexpr const char* kPerTokenHeadDtype = "fp8_per_token_head";

/// --kv-cache-rotation: "none" -> false, "hadamard" -> true. Throws std::invalid_argument
/// naming the flag for another spelling, or for hadamard when head_dim is not a power of two
/// (the fast Walsh-Hadamard transform needs one).
bool parse_kv_cache_rotation(const std::string& rotation, int64_t head_dim);

/// The start-up warning when --kv-cache-rotation hadamard meets static k_scale loaded from
/// `source` ("--kv-scales-path FILE", "the checkpoint"): such scales carry no marker saying
/// they were calibrated on rotated K.
std::string kv_rotation_scales_warning(const std::string& source);

/// kv_cache_dtype spelling -> dtype: auto/bf16 -> BF16, fp16, fp8/fp8_e4m3 -> FP8_E4M3,
/// fp8_e5m2, fp8_per_token_head -> FP8_E4M3 (with per-token-head scales). Throws
/// std::invalid_argument naming --kv-cache-dtype otherwise.
DType parse_kv_cache_dtype(const std::string& name);

/// Resolves dtypes, scales (in order: --kv-scales-path file, checkpoint tensors,
/// --calculate-kv-scales on the built-in calibration text, else 1.0 with a warning naming the
/// layers) and the block budget. When any layer is FP8 with static scales (and the weights
/// are not --load-format dummy), checks them against
/// the K/V of a start-up pass (the --calculate-kv-scales pass, else kv_check_ids through the
/// model) and adds one warning per layer whose scales clip any of those values
/// (kv_clip_warnings, engine/kv_saturation.h). max_model_len: 0 = the model's context. Throws
/// std::invalid_argument for a skip-layer index out of range, max_model_len beyond the model's
/// context, a budget smaller than one max_model_len sequence or larger than the memory
/// available (MemAvailable, a cgroup v2 memory.max), --num-kv-blocks overflowing byte counts,
/// or a non-finite / non-positive scale; ModelFileError for a bad scales file or checkpoint scale tensors.
/// The budget, first that applies: kv_cache_memory_bytes; num_kv_blocks; gpu_memory_utilization
/// F (vLLM's meaning) = F x the device's memory - weights - activations, the device's memory
/// being, on the CPU, LoadedModel::host_memory_available_bytes (throws std::invalid_argument
/// when nothing is left, or on a backend whose memory octet cannot query yet); else
/// CacheConfig::kDefaultMemoryBytes (1 GiB). Activations are sized for max_model_len's
/// default scheduler (2048 tokens per step, 256 sequences). No CUDA graph reserve.
KVCacheSetup setup_kv_cache(const CacheConfig& cache, int64_t max_model_len,
                            const LoadedModel& model);
/// The same with the scheduler's limits: max_model_len (0 = the model's context), and
/// max_num_batched_tokens / max_num_seqs that size the activations. cuda_graphs (the engine's
/// !--enforce-eager): on a backend that supports graphs, the gpu_memory_utilization budget
/// also leaves room for the decode graphs of decode_graph_sizes(max_num_seqs)
/// (engine/kv_budget.h's estimate, MemoryFigures::graph_reserve_bytes). Every rank's
/// workspace is reserved here (Backend::reserve_workspace, for these limits and graphs;
/// nothing on the CPU), before the KV pool exists. On a device (Backend::memory_info) the
/// budget follows engine/kv_budget.h's rule from the free memory measured after that, and
/// throws std::invalid_argument, its message listing every part, when the workspace does
/// not fit, when the rule leaves less than one max_model_len sequence, or when an explicit
/// budget does not fit the device's free memory less activations and graphs (the host's
/// memory does not bound a device's pool).
KVCacheSetup setup_kv_cache(const CacheConfig& cache, const SchedulerConfig& scheduler,
                            const LoadedModel& model, bool cuda_graphs = false);

}  // namespace octet
