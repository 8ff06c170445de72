#pragma once
// Start-up of the paged KV cache from CacheConfig and the loaded model: each layer's dtype
// (kv_cache_dtype, kv_cache_dtype_skip_layers), its FP8 scales and where they came from, and
// how many blocks the budget holds (DESIGN.md "Core types": CacheConfig, KVCacheSpec).
#include <cstdint>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "models/paged_kv_cache.h"

namespace octet {

struct LoadedModel;
class Tokenizer;

/// The token ids --calculate-kv-scales runs through the model: the built-in calibration text
/// (models/kv_scales.h), then every special token of the vocabulary (chat markers such as
/// <|im_start|>, BOS, EOS), each followed by a short line of text. Plain text never holds
/// special tokens, yet every chat prompt does, and their K/V can be far larger than a word's:
/// calibrated on the text alone, SmolLM2's FP8 scales saturated on its own system-prompt
/// markers and "What is the capital of France?" got a wrong answer. vocab: the model's
/// vocab_size (ids at or above it are skipped).
std::vector<int32_t> kv_calibration_ids(const Tokenizer& tok, int64_t vocab);

struct KVCacheSetup {
  std::vector<KVLayerSpec> layers;  // [num_hidden_layers]
  int64_t block_size = 0;           // tokens
  int64_t num_usable_blocks = 0;    // blocks the budget holds; the pool adds the null block
  int64_t bytes_per_block = 0;      // all layers, K and V
  int64_t budget_bytes = 0;         // num_usable_blocks * bytes_per_block <= the budget
  int64_t max_model_len = 0;        // tokens
  uint64_t cache_salt = 0;          // folds every layer's dtype and scales (prefix-cache key)
  std::vector<std::string> warnings;
  std::string report;               // the start-up table (budget + one row per layer)
};

/// --kv-cache-dtype of the dynamic per-(token, KV head) FP8 E4M3 cache (vLLM's name): one FP32
/// scale per token and KV head for K and for V, amax / 448 of that row, computed when K/V are
/// written and stored beside the block (KVLayerSpec::per_token_head). No calibration, no
/// scale shared between requests; --kv-scales-path is refused, checkpoint scales ignored.
inline constexpr const char* kPerTokenHeadDtype = "fp8_per_token_head";

/// kv_cache_dtype spelling -> dtype: auto/bf16 -> BF16, fp16, fp8/fp8_e4m3 -> FP8_E4M3,
/// fp8_e5m2, fp8_per_token_head -> FP8_E4M3 (with per-token-head scales). Throws
/// std::invalid_argument naming --kv-cache-dtype otherwise.
DType parse_kv_cache_dtype(const std::string& name);

/// Resolves dtypes, scales (in order: --kv-scales-path file, checkpoint tensors,
/// --calculate-kv-scales on the built-in calibration text, else 1.0 with a warning naming the
/// layers) and the block budget. max_model_len: 0 = the model's context. Throws
/// std::invalid_argument for a skip-layer index out of range, max_model_len beyond the model's
/// context, a budget smaller than one max_model_len sequence or larger than the memory
/// available (MemAvailable, a cgroup v2 memory.max), --num-kv-blocks overflowing byte counts,
/// or a non-finite / non-positive scale; ModelFileError for a bad scales file or checkpoint scale tensors.
KVCacheSetup setup_kv_cache(const CacheConfig& cache, int64_t max_model_len,
                            const LoadedModel& model);

}  // namespace octet
