#pragma once
// EngineArgs: everything the continuous-batching engine is started with (vLLM's EngineArgs):
// the model, how its linears are quantized, the KV cache and the scheduler. Declared once;
// `octet generate`, `octet serve` flags and config-file keys derive from visit().
#include <stdexcept>
#include <string>

#include "config/engine_config.h"
#include "config/generate_config.h"

namespace octet {

struct EngineArgs {
  std::string model;
  std::string load_format = "auto";
  std::string tokenizer;
  int64_t seed = -1;
  std::string quantization = "auto";
  std::string weight_strategy = "channel";
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;
  bool enforce_eager = false;
  MultiNodeConfig multinode;
  CacheConfig cache;
  SchedulerConfig scheduler;

  // Added last, so that positional aggregate initialisation keeps its meaning.
  int64_t threads = 0;  // CPU worker threads; 0: from the affinity mask and cgroup quota
  std::string lm_head_dtype = "bf16";
  // Not a flag: the benchmarks set it. Touch the whole KV pool at start; on the CPU its pages
  // are otherwise faulted in as blocks are first used, inside timed steps.
  bool prefault_kv_cache = false;
  // Not a flag: bench latency sets it. On the CPU at TP 1 the backend is wrapped in a
  // LaunchCounter (kernels/launch_counter.h): decode steps report the kernels the CUDA backend
  // would launch for them (Engine::decode_step_kernels).
  bool count_kernel_launches = false;

  template <class Visitor>
  static void visit(EngineArgs& c, Visitor&& v) {
    v(c.model, "model", "GGUF file or Hugging Face checkpoint directory (required)");
    v(c.load_format, "load_format", kLoadFormatHelp);
    v(c.tokenizer, "tokenizer", kTokenizerHelp);
    v(c.seed, "seed", "seed of --load-format dummy weights (-1 = the fixed default 0)");
    v(c.quantization, "quantization", kQuantizationHelp);
    v(c.weight_strategy, "weight_strategy", kWeightStrategyHelp);
    v(c.device, "device", kDeviceHelp);
    v(c.tensor_parallel_size, "tensor_parallel_size", kTensorParallelSizeHelp);
    MultiNodeConfig::visit(c.multinode, v);
    v(c.threads, "threads", kThreadsHelp);
    v(c.lm_head_dtype, "lm_head_dtype", kLmHeadDtypeHelp);
    v(c.enforce_eager, "enforce_eager",
      "run every step eagerly: no CUDA graphs for decode steps (vLLM's flag; graphs are "
      "captured per batch size 1, 2, 4, 8, 16, 24, ... up to max_num_seqs)");
    CacheConfig::visit(c.cache, v);
    SchedulerConfig::visit(c.scheduler, v);
  }

  /// Validates every part; throws std::invalid_argument naming the flag.
  void validate() const {
    if (model.empty()) throw std::invalid_argument("--model is required");
    validate_load_format(load_format);
    if (seed < -1) throw std::invalid_argument("--seed must be >= 0, or -1 for the default");
    validate_quantization_flags(quantization, weight_strategy);
    validate_device(device);
    validate_tensor_parallel_size(tensor_parallel_size);
    multinode.validate(device, tensor_parallel_size);
    validate_threads(threads);
    validate_lm_head_dtype(lm_head_dtype);
    cache.validate();
    scheduler.validate();
  }
};

/// EngineArgs holding the model-loading options of a command's config (model, load_format,
/// tokenizer, seed where the config has one, quantization, weight_strategy, device,
/// tensor_parallel_size, multinode, threads, lm_head_dtype); cache and scheduler keep their
/// defaults.
template <class Config>
EngineArgs model_engine_args(const Config& c) {
  EngineArgs a;
  a.model = c.model;
  a.load_format = c.load_format;
  a.tokenizer = c.tokenizer;
  // The dummy weights' seed: generate's sampling seed may be any int64, and a negative one
  // keeps the default weights (-1).
  if constexpr (requires { c.seed; }) a.seed = c.seed < 0 ? -1 : c.seed;
  a.quantization = c.quantization;
  a.weight_strategy = c.weight_strategy;
  a.device = c.device;
  a.tensor_parallel_size = c.tensor_parallel_size;
  if constexpr (requires { c.enforce_eager; }) a.enforce_eager = c.enforce_eager;
  a.multinode = c.multinode;
  a.threads = c.threads;
  a.lm_head_dtype = c.lm_head_dtype;
  return a;
}

}  // namespace octet
