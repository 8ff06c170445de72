#pragma once
// Options of `octet bench engine`: continuous-batching decode throughput against concurrency,
// and decode inter-token latency against context length per KV cache dtype.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "config/generate_config.h"

namespace octet {

struct BenchEngineConfig {
  std::string model;
  std::string load_format = "auto";
  std::string tokenizer;
  int64_t kv_cache_memory_bytes = 0;    // CacheConfig's, for every engine of the bench
  double gpu_memory_utilization = 0.0;  // likewise
  std::string quantization = "auto";
  std::string weight_strategy = "channel";
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;
  MultiNodeConfig multinode;
  std::string concurrency = "1,4,16,64";        // concurrent sequences per throughput run
  int64_t input_len = 32;                       // prompt tokens per sequence (random ids)
  int64_t output_len = 64;                      // generated tokens per sequence
  std::string throughput_kv_cache_dtype = "fp8_e4m3";
  std::string contexts = "512,1024,2048,4096,8192";  // context lengths for the ITL sweep
  std::string kv_cache_dtypes = "bf16,fp8_e4m3";     // dtypes of the ITL sweep
  int64_t itl_tokens = 32;                      // decode steps timed per context length
  bool json = false;

  // Added last, so that positional aggregate initialisation keeps its meaning.
  int64_t threads = 0;  // CPU worker threads; 0: from the affinity mask and cgroup quota
  std::string lm_head_dtype = "bf16";

  template <class Visitor>
  static void visit(BenchEngineConfig& c, Visitor&& v) {
    v(c.model, "model", "GGUF file or Hugging Face checkpoint directory (required)");
    v(c.load_format, "load_format", kLoadFormatHelp);
    v(c.tokenizer, "tokenizer", kTokenizerHelp);
    v(c.kv_cache_memory_bytes, "kv_cache_memory_bytes",
      "KV cache budget in bytes of every engine the bench starts (0 = --gpu-memory-utilization, "
      "else 1 GiB)");
    v(c.gpu_memory_utilization, "gpu_memory_utilization",
      "fraction of the device's memory octet may use (as octet serve's; 0 = the default)");
    v(c.quantization, "quantization", kQuantizationHelp);
    v(c.weight_strategy, "weight_strategy", kWeightStrategyHelp);
    v(c.device, "device", kDeviceHelp);
    v(c.tensor_parallel_size, "tensor_parallel_size", kTensorParallelSizeHelp);
    MultiNodeConfig::visit(c.multinode, v);
    v(c.threads, "threads", kThreadsHelp);
    v(c.lm_head_dtype, "lm_head_dtype", kLmHeadDtypeHelp);
    v(c.concurrency, "concurrency", "comma-separated numbers of concurrent sequences ('' skips)");
    v(c.input_len, "input_len", "prompt tokens per sequence in the throughput runs");
    v(c.output_len, "output_len", "generated tokens per sequence in the throughput runs");
    v(c.throughput_kv_cache_dtype, "throughput_kv_cache_dtype",
      "kv_cache_dtype of the throughput runs");
    v(c.contexts, "contexts", "comma-separated context lengths of the ITL sweep ('' skips)");
    v(c.kv_cache_dtypes, "kv_cache_dtypes", "comma-separated kv_cache_dtype values to sweep");
    v(c.itl_tokens, "itl_tokens", "decode steps timed at each context length");
    v(c.json, "json", "print one JSON object");
  }

  void validate() const {
    if (model.empty()) throw std::invalid_argument("--model is required");
    validate_load_format(load_format);
    CacheConfig cache;  // the two budget options, checked as serve checks them
    cache.kv_cache_memory_bytes = kv_cache_memory_bytes;
    cache.gpu_memory_utilization = gpu_memory_utilization;
    cache.validate();
    validate_quantization_flags(quantization, weight_strategy);
    validate_device(device);
    validate_tensor_parallel_size(tensor_parallel_size);
    multinode.validate(device, tensor_parallel_size);
    multinode.require_one_node();
    validate_threads(threads);
    validate_lm_head_dtype(lm_head_dtype);
    if (input_len <= 0 || output_len < 2 || itl_tokens < 2)
      throw std::invalid_argument("--input-len must be positive, --output-len and "
                                  "--itl-tokens at least 2");
    if (input_len > SchedulerConfig::kMaxTokens ||
        output_len > SchedulerConfig::kMaxTokens - input_len ||
        itl_tokens > SchedulerConfig::kMaxTokens)
      throw std::invalid_argument("--input-len + --output-len and --itl-tokens must be at most " +
                                  std::to_string(SchedulerConfig::kMaxTokens));
  }
};

}  // namespace octet
