#include "config/generate_config.h"

#include <cmath>
#include <stdexcept>

namespace octet {

void validate_quantization_flags(const std::string& quantization,
                                 const std::string& weight_strategy) {
  if (quantization != "auto" && quantization != "fp8" && quantization != "none")
    throw std::invalid_argument("--quantization must be auto, fp8 or none, got '" +
                                quantization + "'");
  if (weight_strategy != "channel" && weight_strategy != "tensor")
    throw std::invalid_argument("--weight-strategy must be channel or tensor, got '" +
                                weight_strategy + "'");
}

void validate_load_format(const std::string& load_format) {
  if (load_format != "auto" && load_format != "dummy")
    throw std::invalid_argument("--load-format must be auto or dummy, got '" + load_format + "'");
}

void validate_device(const std::string& device) {
  if (device == "cpu" || device == "cuda" || device == "auto") return;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
      device.find_first_not_of("0123456789", 5) == std::string::npos)
    return;
  throw std::invalid_argument("--device must be cpu, cuda, cuda:N or auto, got '" + device + "'");
}

void validate_tensor_parallel_size(int64_t tensor_parallel_size) {
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64)
    throw std::invalid_argument("--tensor-parallel-size must be in [1, 64], got " +
                                std::to_string(tensor_parallel_size));
}

void validate_threads(int64_t threads) {
  if (threads < 0 || threads > 1024)
    throw std::invalid_argument("--threads must be in [0, 1024] (0: automatic), got " +
                                std::to_string(threads));
}

void validate_lm_head_dtype(const std::string& lm_head_dtype) {
  if (lm_head_dtype != "bf16" && lm_head_dtype != "fp8")
    throw std::invalid_argument("--lm-head-dtype must be bf16 or fp8, got '" + lm_head_dtype +
                                "'");
}

void GenerateConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  validate_load_format(load_format);
  validate_quantization_flags(quantization, weight_strategy);
  validate_device(device);
  validate_tensor_parallel_size(tensor_parallel_size);
  multinode.validate(device, tensor_parallel_size);
  validate_threads(threads);
  validate_lm_head_dtype(lm_head_dtype);
  if (int(!prompt.empty()) + int(!prompt_ids.empty()) + int(!prompts_file.empty()) != 1)
    throw std::invalid_argument("give exactly one of --prompt TEXT, --prompt-ids 1,2,3 and "
                                "--prompts-file FILE (an empty value counts as not given)");
  if (max_tokens < 0 || max_tokens > SchedulerConfig::kMaxTokens)
    throw std::invalid_argument("--max-tokens must be in [0, " +
                                std::to_string(SchedulerConfig::kMaxTokens) + "]");
  if (!std::isfinite(temperature) || temperature < 0)
    throw std::invalid_argument("--temperature must be a finite number >= 0");
  if (!(top_p > 0 && top_p <= 1)) throw std::invalid_argument("--top-p must be in (0, 1]");
  cache.validate();
  scheduler.validate();
}

void BenchLatencyConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  validate_load_format(load_format);
  validate_quantization_flags(quantization, weight_strategy);
  validate_device(device);
  validate_tensor_parallel_size(tensor_parallel_size);
  multinode.validate(device, tensor_parallel_size);
  multinode.require_one_node();
  validate_threads(threads);
  validate_lm_head_dtype(lm_head_dtype);
  if (input_len <= 0 || output_len <= 0 || num_iters <= 0)
    throw std::invalid_argument("--input-len, --output-len and --num-iters must be positive");
  if (num_iters_warmup < 0 || num_iters_warmup > 1000)
    throw std::invalid_argument("--num-iters-warmup must be in [0, 1000], got " +
                                std::to_string(num_iters_warmup));
  if (input_len > SchedulerConfig::kMaxTokens || output_len > SchedulerConfig::kMaxTokens -
                                                                   input_len)
    throw std::invalid_argument("--input-len + --output-len must be at most " +
                                std::to_string(SchedulerConfig::kMaxTokens));
  if (seed < -1) throw std::invalid_argument("--seed must be >= 0, or -1 for the default");
  if (max_model_len != 0 && max_model_len < input_len + output_len + 1)
    throw std::invalid_argument("--max-model-len " + std::to_string(max_model_len) +
                                " must be 0 or at least --input-len + --output-len + 1 (" +
                                std::to_string(input_len + output_len + 1) + ")");
  if (max_model_len > SchedulerConfig::kMaxTokens)
    throw std::invalid_argument("--max-model-len must be at most " +
                                std::to_string(SchedulerConfig::kMaxTokens));
  cache.validate();
}

void PerplexityConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  validate_load_format(load_format);
  if (text.empty()) throw std::invalid_argument("--text is required");
  validate_quantization_flags(quantization, weight_strategy);
  validate_device(device);
  validate_tensor_parallel_size(tensor_parallel_size);
  multinode.validate(device, tensor_parallel_size);
  multinode.require_one_node();
  validate_threads(threads);
  validate_lm_head_dtype(lm_head_dtype);
  if (max_tokens < 2 || max_tokens > SchedulerConfig::kMaxTokens)
    throw std::invalid_argument("--max-tokens must be in [2, " +
                                std::to_string(SchedulerConfig::kMaxTokens) + "]");
  if (kv_cache_dtype.empty() &&
      (!kv_cache_dtype_skip_layers.empty() || !kv_scales_path.empty() || calculate_kv_scales))
    throw std::invalid_argument("--kv-cache-dtype-skip-layers, --kv-scales-path and "
                                "--calculate-kv-scales need --kv-cache-dtype");
  if (kv_cache_rotation != "none" && kv_cache_rotation != "hadamard")
    throw std::invalid_argument("--kv-cache-rotation must be none or hadamard, got '" +
                                kv_cache_rotation + "'");
  if (kv_cache_dtype.empty() && kv_cache_rotation != "none")
    throw std::invalid_argument("--kv-cache-rotation needs --kv-cache-dtype");
  if (!kv_cache_dtype.empty() && compare)
    throw std::invalid_argument("--compare (weights vs FP32) and --kv-cache-dtype (KV vs bf16) "
                                "are separate runs: give one of them");
}

void QuantizeConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  if (output.empty()) throw std::invalid_argument("--output is required");
}

}  // namespace octet
