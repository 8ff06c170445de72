#pragma once
// What an FP8 KV cache costs in accuracy: the same text scored through the paged engine with
// a given kv_cache_dtype and with bf16 KV, everything else equal (`octet perplexity
// --kv-cache-dtype D`). The text runs as one prompt with prompt logprobs, so every position's
// attention reads K/V back from the cache in that dtype.
#include <cstdint>
#include <string>

#include "config/engine_args.h"

namespace octet {

struct KVAccuracyResult {
  std::string kv_cache_dtype;          // as given, e.g. "fp8_e4m3"
  int64_t tokens = 0;                  // tokens scored (tokens - 1 predictions)
  double perplexity = 0.0;             // exp(mean NLL) with kv_cache_dtype
  double baseline_perplexity = 0.0;    // the same with bf16 KV
  double top1_agreement = 0.0;         // fraction of positions whose most likely next token
                                       // is the same as with bf16 KV
  double mean_abs_logprob_diff = 0.0;  // mean |log p(next token)| difference vs bf16, nats
  double max_abs_logprob_diff = 0.0;
};

/// Tokenizes `text` (BOS when the model asks for it), keeps the first min(max_tokens,
/// max_model_len) ids and scores them twice: with args.cache (its kv_cache_dtype, scales,
/// skip layers, rotation) and with the same args but kv_cache_dtype bf16 and
/// kv_cache_rotation none. Throws std::invalid_argument
/// for fewer than 2 tokens or bad options, ModelFileError for model files.
KVAccuracyResult compare_kv_cache_dtype(const EngineArgs& args, const std::string& text,
                                        int64_t max_tokens);

}  // namespace octet
