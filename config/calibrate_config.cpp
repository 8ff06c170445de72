#include "config/calibrate_config.h"

#include "config/engine_config.h"

#include <cmath>
#include <stdexcept>

namespace octet {

void CalibrateConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  if (output.empty())
    throw std::invalid_argument("--output is required (FILE.json or a checkpoint DIR)");
  if (num_samples < 1) throw std::invalid_argument("--num-samples must be >= 1");
  if (max_seq_len < 1) throw std::invalid_argument("--max-seq-len must be >= 1");
  if (!std::isfinite(headroom) || headroom < 1.0)
    throw std::invalid_argument("--headroom must be a finite number >= 1");
  if (kv_cache_rotation != "none" && kv_cache_rotation != "hadamard")
    throw std::invalid_argument("--kv-cache-rotation must be none or hadamard, got '" +
                                kv_cache_rotation + "'");
  validate_quantization_flags(quantization, "channel");
  validate_device(device);
  validate_tensor_parallel_size(tensor_parallel_size);
}

void KVReportConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  if (text.empty() && !builtin_text)
    throw std::invalid_argument(
        "--text is required (a text file to measure on), or --builtin-text");
  if (!text.empty() && builtin_text)
    throw std::invalid_argument("--text and --builtin-text: give one of them");
  (void)KVSkipLayers::parse(kv_cache_dtype_skip_layers);
  if (max_tokens < 2) throw std::invalid_argument("--max-tokens must be >= 2");
  if (query_stride < 1) throw std::invalid_argument("--query-stride must be >= 1");
  if (!std::isfinite(target_kl) || target_kl < 0)
    throw std::invalid_argument("--target-kl must be a finite number >= 0");
  validate_quantization_flags(quantization, "channel");
}

}  // namespace octet
