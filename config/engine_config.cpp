#include "config/engine_config.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace octet {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::vector<int64_t> KVSkipLayers::resolve(
    const std::vector<int64_t>& layer_sliding_window) const {
  const auto num_layers = static_cast<int64_t>(layer_sliding_window.size());
  std::vector<bool> skip(layer_sliding_window.size(), false);
  for (int64_t l : layers) {
    if (l < 0 || l >= num_layers)
      throw std::invalid_argument("--kv-cache-dtype-skip-layers: layer " + std::to_string(l) +
                                  " is out of range; the model has layers 0.." +
                                  std::to_string(num_layers - 1));
    skip[static_cast<size_t>(l)] = true;
  }
  std::vector<int64_t> out;
  for (int64_t l = 0; l < num_layers; ++l)
    if (skip[static_cast<size_t>(l)] ||
        (sliding_window && layer_sliding_window[static_cast<size_t>(l)] > 0))
      out.push_back(l);
  return out;
}

KVSkipLayers KVSkipLayers::parse(const std::string& spec) {
  KVSkipLayers out;
  if (trim(spec).empty()) return out;
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("--kv-cache-dtype-skip-layers '" + spec + "': " + why +
                                 " (expected comma-separated layer indices and/or "
                                 "'sliding_window', e.g. 0,5,sliding_window)");
  };
  size_t start = 0;
  while (true) {
    const size_t comma = spec.find(',', start);
    const std::string tok =
        trim(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (tok.empty()) throw bad("empty entry");
    if (tok == "sliding_window") {
      out.sliding_window = true;
    } else {
      int64_t v = 0;
      for (char c : tok) {
        if (c < '0' || c > '9') throw bad("'" + tok + "' is neither a layer index nor "
                                          "sliding_window");
        if (v > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10)
          throw bad("layer index '" + tok + "' is too large");
        v = v * 10 + (c - '0');
      }
      out.layers.push_back(v);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::sort(out.layers.begin(), out.layers.end());
  out.layers.erase(std::unique(out.layers.begin(), out.layers.end()), out.layers.end());
  return out;
}

void CacheConfig::validate() const {
  // vLLM's spellings too: bfloat16 (its CacheDType), float16 / half (torch names).
  static const char* const kDtypes[] = {"auto", "bf16", "bfloat16", "fp16", "float16", "half",
                                        "fp8", "fp8_e4m3", "fp8_e5m2",
                                        "fp8_per_token_head"};
  if (std::find(std::begin(kDtypes), std::end(kDtypes), kv_cache_dtype) == std::end(kDtypes))
    throw std::invalid_argument("--kv-cache-dtype must be auto, bf16, fp16, fp8, fp8_e4m3, "
                                "fp8_e5m2 or fp8_per_token_head, got '" + kv_cache_dtype + "'");
  if (kv_cache_dtype == "fp8_per_token_head" && !kv_scales_path.empty())
    throw std::invalid_argument(
        "--kv-scales-path cannot be used with --kv-cache-dtype fp8_per_token_head: its scales "
        "are computed per token and KV head when K/V are written (drop one of the two)");
  if (block_size < 1 || block_size > 1024 || (block_size & (block_size - 1)) != 0)
    throw std::invalid_argument("--block-size must be a power of two in [1, 1024], got " +
                                std::to_string(block_size));
  if (kv_cache_memory_bytes < 0 || kv_cache_memory_bytes > kMaxMemoryBytes)
    throw std::invalid_argument("--kv-cache-memory-bytes must be in [0, " +
                                std::to_string(kMaxMemoryBytes) + "] (0 = default), got " +
                                std::to_string(kv_cache_memory_bytes));
  if (!(gpu_memory_utilization >= 0.0 && gpu_memory_utilization <= 1.0))  // NaN fails too
    throw std::invalid_argument("--gpu-memory-utilization must be in (0, 1] (0 = the default), "
                                "got " + std::to_string(gpu_memory_utilization));
  if (num_kv_blocks < 0 || num_kv_blocks == 1 || num_kv_blocks > kMaxNumKVBlocks)
    throw std::invalid_argument("--num-kv-blocks must be 0 (use the byte budget) or in [2, " +
                                std::to_string(kMaxNumKVBlocks) +
                                "] (block 0 is reserved; block ids are int32), got " +
                                std::to_string(num_kv_blocks));
  KVSkipLayers::parse(kv_cache_dtype_skip_layers);
  if (kv_cache_rotation != "none" && kv_cache_rotation != "hadamard")
    throw std::invalid_argument("--kv-cache-rotation must be none or hadamard, got '" +
                                kv_cache_rotation + "'");
}

void SchedulerConfig::validate() const {
  if (max_num_seqs < 1 || max_num_seqs > kMaxNumSeqs)
    throw std::invalid_argument("--max-num-seqs must be in [1, " + std::to_string(kMaxNumSeqs) +
                                "], got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < 1 || max_num_batched_tokens > kMaxTokens)
    throw std::invalid_argument("--max-num-batched-tokens must be in [1, " +
                                std::to_string(kMaxTokens) + "] (int32 token positions), got " +
                                std::to_string(max_num_batched_tokens));
  if (max_model_len < 0 || max_model_len > kMaxTokens)
    throw std::invalid_argument("--max-model-len must be in [0, " + std::to_string(kMaxTokens) +
                                "] (0 = the model's context; int32 token positions), got " +
                                std::to_string(max_model_len));
  if (scheduling_policy != "fcfs" && scheduling_policy != "priority")
    throw std::invalid_argument("--scheduling-policy must be fcfs or priority, got '" +
                                scheduling_policy + "'");
  // As vLLM: without chunked prefill a whole prompt must fit in one step.
  if (!enable_chunked_prefill && max_model_len > 0 && max_num_batched_tokens < max_model_len)
    throw std::invalid_argument(
        "--max-num-batched-tokens (" + std::to_string(max_num_batched_tokens) +
        ") must be >= --max-model-len (" + std::to_string(max_model_len) +
        ") when chunked prefill is disabled (--no-enable-chunked-prefill)");
}

}  // namespace octet
