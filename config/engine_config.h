#pragma once
// Options of the continuous-batching engine, each declared once (name, default, help) with
// vLLM's names (EngineArgs / CacheConfig / SchedulerConfig), so that flags (--kv-cache-dtype),
// config-file keys (kv_cache_dtype) and the startup printout all come from one list
// (STYLE.md 4). Validation that needs no model happens here; checks against the model (layer
// indices, max_model_len vs the model's context, the memory budget) happen at engine start-up.
#include <cstdint>
#include <string>
#include <vector>

namespace octet {

/// KV cache layout and scales (vLLM CacheConfig).
struct CacheConfig {
  std::string kv_cache_dtype = "auto";  // auto (= bf16) | bf16 | fp16 | fp8 (= fp8_e4m3) |
                                        // fp8_e4m3 | fp8_e5m2
  int64_t block_size = 16;              // tokens per KV block, a power of two
  int64_t kv_cache_memory_bytes = 0;    // KV budget in bytes; 0 = use num_kv_blocks or default
  double gpu_memory_utilization = 0.0;  // fraction of the device's memory; 0 = default (below)
  int64_t num_kv_blocks = 0;            // KV budget in blocks (vLLM num_gpu_blocks_override)
  std::string kv_cache_dtype_skip_layers;  // "0,5,sliding_window": layers kept in bf16
  std::string kv_scales_path;              // JSON scales file (highest precedence)
  bool calculate_kv_scales = false;        // compute scales from a calibration text at start
  bool enable_prefix_caching = true;
  bool disable_hybrid_kv_cache_manager = false;  // one block table for all layers (no freeing)
  std::string kv_cache_rotation = "none";  // none | hadamard (q and k per head, before the write)

  /// Default KV budget when neither kv_cache_memory_bytes nor num_kv_blocks is set.
  static constexpr int64_t kDefaultMemoryBytes = int64_t{1} << 30;
  /// Largest KV budget accepted (1 PiB): the block arithmetic stays far from int64 overflow.
  static constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;
  /// Largest num_kv_blocks accepted: block ids (+ the reserved block 0) are int32.
  static constexpr int64_t kMaxNumKVBlocks = (int64_t{1} << 31) - 2;

  template <class Visitor>
  static void visit(CacheConfig& c, Visitor&& v) {
    v(c.kv_cache_dtype, "kv_cache_dtype",
      "KV cache dtype: auto (bf16), bf16 (= bfloat16), fp16 (= float16, half), fp8 (= fp8_e4m3), "
      "fp8_e4m3, fp8_e5m2, fp8_per_token_head (E4M3 with one scale per token and KV head, "
      "computed on write: no calibration)");
    v(c.block_size, "block_size", "tokens per KV cache block (a power of two)");
    v(c.kv_cache_memory_bytes, "kv_cache_memory_bytes",
      "KV cache budget in bytes (vLLM's flag; overrides --num-kv-blocks and "
      "--gpu-memory-utilization); 0 = --num-kv-blocks, else --gpu-memory-utilization, else "
      "1 GiB");
    v(c.gpu_memory_utilization, "gpu_memory_utilization",
      "fraction of the device's memory octet may use, in (0, 1] (vLLM's meaning): the KV cache "
      "gets that much minus the weights and activations. On the CPU the device's memory is "
      "MemAvailable (or a cgroup memory.max's room, if lower) when the model starts loading. "
      "0 = the default: 0.9 where octet can query the device's memory (GPUs); on the CPU the KV "
      "budget stays 1 GiB, as vLLM's CPU backend uses a fixed VLLM_CPU_KVCACHE_SPACE");
    v(c.num_kv_blocks, "num_kv_blocks",
      "KV cache budget in blocks (vLLM's num_gpu_blocks_override); 0 = use the byte budget");
    v(c.kv_cache_dtype_skip_layers, "kv_cache_dtype_skip_layers",
      "comma-separated layer indices and/or 'sliding_window' whose KV stays bf16");
    v(c.kv_cache_rotation, "kv_cache_rotation",
      "none, or hadamard: rotate each head's q and k by the normalized Walsh-Hadamard matrix "
      "after RoPE, before the KV write (q.k unchanged; outlier channels spread before FP8 "
      "quantization, as QuaRot). Needs a power-of-two head_dim; static k_scale must then be "
      "calibrated with rotation (octet calibrate --kv-cache-rotation hadamard); pointless with "
      "16-bit KV");
    v(c.kv_scales_path, "kv_scales_path",
      "JSON file of per-layer k_scale/v_scale (a number or one per KV head); overrides the "
      "checkpoint's scales");
    v(c.calculate_kv_scales, "calculate_kv_scales",
      "compute FP8 KV scales at start-up from a built-in calibration text, then freeze them");
    v(c.enable_prefix_caching, "enable_prefix_caching",
      "reuse KV blocks of identical prompt prefixes (--no-enable-prefix-caching turns it off)");
    v(c.disable_hybrid_kv_cache_manager, "disable_hybrid_kv_cache_manager",
      "keep every layer's KV blocks for the whole context (vLLM's flag). By default layers "
      "with different sliding windows (Gemma 3, Mistral) get KV cache groups with their own "
      "block tables over one pool, and a window layer's blocks behind its window are freed");
  }

  /// Throws std::invalid_argument naming the flag: unknown kv_cache_dtype, block_size not a
  /// power of two in [1, 1024], budgets negative or over kMaxMemoryBytes / kMaxNumKVBlocks,
  /// gpu_memory_utilization outside (0, 1] (0 = default), a malformed skip-layer list,
  /// kv_cache_rotation other than none | hadamard (head_dim is checked at start-up).
  void validate() const;
};

/// Continuous-batching limits and policy (vLLM SchedulerConfig).
struct SchedulerConfig {
  int64_t max_num_seqs = 256;             // requests running at once
  int64_t max_num_batched_tokens = 2048;  // tokens per engine step (the token budget)
  int64_t max_model_len = 0;              // prompt + output tokens; 0 = the model's context
  bool enable_chunked_prefill = true;     // split long prompts over steps
  std::string scheduling_policy = "fcfs";  // fcfs | priority (lower value runs first)

  /// Largest token count accepted (max_model_len, max_num_batched_tokens): token positions
  /// and batch offsets are int32.
  static constexpr int64_t kMaxTokens = (int64_t{1} << 31) - 1;
  /// Largest max_num_seqs accepted (a bound on per-step batch rows, far beyond any real use).
  static constexpr int64_t kMaxNumSeqs = int64_t{1} << 20;

  template <class Visitor>
  static void visit(SchedulerConfig& c, Visitor&& v) {
    v(c.max_num_seqs, "max_num_seqs", "maximum number of sequences running at once");
    v(c.max_num_batched_tokens, "max_num_batched_tokens", "maximum tokens per engine step");
    v(c.max_model_len, "max_model_len",
      "maximum prompt + output tokens per sequence (0 = the model's context length)");
    v(c.enable_chunked_prefill, "enable_chunked_prefill",
      "split prompts longer than the step's token budget over several steps");
    v(c.scheduling_policy, "scheduling_policy",
      "fcfs (arrival order) or priority (lower priority value first, then arrival)");
  }

  /// Throws std::invalid_argument naming the flag for values out of range (non-positive, or
  /// over kMaxTokens / kMaxNumSeqs) or an unknown policy.
  void validate() const;
};

/// Parsed kv_cache_dtype_skip_layers: explicit layer indices (unchecked against the model) and
/// whether every sliding-window layer is included. Throws std::invalid_argument for a token that
/// is neither a non-negative integer nor "sliding_window".
struct KVSkipLayers {
  std::vector<int64_t> layers;
  bool sliding_window = false;
  static KVSkipLayers parse(const std::string& spec);
  /// The layers skipped in a model whose layer l has window layer_sliding_window[l] (0 = full
  /// attention), ascending, each once. Throws std::invalid_argument naming the flag for an
  /// index beyond the model's layers.
  std::vector<int64_t> resolve(const std::vector<int64_t>& layer_sliding_window) const;
};

}  // namespace octet
