#pragma once
// Options of `octet generate` and `octet bench latency`, each declared once (name, default,
// help). server/cli.cpp derives the command-line flags (--max-tokens) from the snake_case names,
// and later config files use the same keys (STYLE.md: declare each config field once).
#include <cstdint>
#include <string>

#include "config/engine_config.h"
#include "config/multinode_config.h"

namespace octet {

inline constexpr const char* kQuantizationHelp =
    "linear layers: auto (the checkpoint's FP8 weights, else FP8 W8A8 quantized at load), "
    "fp8 (same), none (unquantized FP32 reference)";
inline constexpr const char* kWeightStrategyHelp =
    "scales of weights quantized at load: channel (one per output channel) or tensor";

inline constexpr const char* kDeviceHelp =
    "device the model runs on: cpu, cuda, cuda:N or auto (auto = the first GPU of compute "
    "capability >= 8.0 when octet is built with CUDA, else the CPU)";

inline constexpr const char* kTensorParallelSizeHelp =
    "number of tensor-parallel ranks (vLLM's --tensor-parallel-size): heads, MLP rows and the "
    "vocabulary split over that many ranks, one thread each on the CPU; in [1, 64], and the "
    "model's head counts must divide by it";

inline constexpr const char* kLoadFormatHelp =
    "auto (weights from --model's files) or dummy (vLLM's name: seeded random FP8 weights, no "
    "weight file; --model is then a preset (llama-3.1-8b, llama-3.1-70b, llama-3.2-1b, tiny-llama), a "
    "directory holding config.json or a config.json file, and --tokenizer any small tokenizer)";
inline constexpr const char* kTokenizerHelp =
    "GGUF file or Hugging Face directory whose tokenizer and chat template to use instead of "
    "the model's (needed by --load-format dummy unless config.json's directory has "
    "tokenizer.json)";

/// Throws std::invalid_argument naming --load-format for a value other than auto or dummy.
void validate_load_format(const std::string& load_format);

/// Throws std::invalid_argument naming --tensor-parallel-size for a value outside [1, 64]
/// (whether the model's head counts divide by it is checked when the model loads).
void validate_tensor_parallel_size(int64_t tensor_parallel_size);

inline constexpr const char* kThreadsHelp =
    "CPU worker threads for the kernels (0: the CPUs of the affinity mask, capped by the "
    "cgroup CPU quota; the start-up log names the count and why); tensor-parallel ranks share "
    "them out";

inline constexpr const char* kLmHeadDtypeHelp =
    "lm_head weight format on the FP8 path: bf16 (16-bit weights), or fp8 (per-channel E4M3 "
    "with per-token dynamic activations, like the other linears: fewer bytes read per decoded "
    "token, at a perplexity cost measured in docs/benchmarks.md)";

/// Throws std::invalid_argument naming --threads for a value outside [0, 1024].
void validate_threads(int64_t threads);

/// Throws std::invalid_argument naming --lm-head-dtype for a value other than bf16 or fp8.
void validate_lm_head_dtype(const std::string& lm_head_dtype);

/// Throws std::invalid_argument naming the value for a --device other than cpu, cuda, cuda:N
/// (N a non-negative integer) or auto. Whether the device is present is checked at start-up.
void validate_device(const std::string& device);

/// Throws std::invalid_argument naming the flag for values outside auto|fp8|none and
/// channel|tensor.
void validate_quantization_flags(const std::string& quantization,
                                 const std::string& weight_strategy);

struct GenerateConfig {
  std::string model;
  std::string load_format = "auto";
  std::string tokenizer;
  std::string quantization = "auto";
  std::string weight_strategy = "channel";
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;
  MultiNodeConfig multinode;
  std::string prompt;
  std::string prompt_ids;
  std::string prompts_file;
  int64_t max_tokens = 128;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t seed = -1;
  bool ignore_eos = false;
  bool json = false;
  CacheConfig cache;
  SchedulerConfig scheduler;

  /// Calls v(field, "snake_case_name", "help") for every option, in flag order.
  // Added last, so that positional aggregate initialisation keeps its meaning.
  int64_t threads = 0;  // CPU worker threads; 0: from the affinity mask and cgroup quota
  std::string lm_head_dtype = "bf16";

  template <class Visitor>
  static void visit(GenerateConfig& c, Visitor&& v) {
    v(c.model, "model", "GGUF file or Hugging Face checkpoint directory (required)");
    v(c.load_format, "load_format", kLoadFormatHelp);
    v(c.tokenizer, "tokenizer", kTokenizerHelp);
    v(c.quantization, "quantization", kQuantizationHelp);
    v(c.weight_strategy, "weight_strategy", kWeightStrategyHelp);
    v(c.device, "device", kDeviceHelp);
    v(c.tensor_parallel_size, "tensor_parallel_size", kTensorParallelSizeHelp);
    MultiNodeConfig::visit(c.multinode, v);
    v(c.threads, "threads", kThreadsHelp);
    v(c.lm_head_dtype, "lm_head_dtype", kLmHeadDtypeHelp);
    v(c.prompt, "prompt", "prompt text (special tokens such as <|im_start|> are recognised)");
    v(c.prompt_ids, "prompt_ids", "prompt as comma-separated token ids, e.g. 1,2,3");
    v(c.prompts_file, "prompts_file",
      "text file with one prompt per line (empty lines skipped; a line that is a JSON string "
      "literal, \"...\", is decoded, so \\n gives multi-line prompts); all run concurrently "
      "through the continuous-batching engine, outputs printed in input order");
    v(c.max_tokens, "max_tokens", "maximum number of tokens to generate (>= 0)");
    v(c.temperature, "temperature", "sampling temperature; 0 (below 1e-5) = greedy");
    v(c.top_p, "top_p", "nucleus sampling mass in (0, 1]");
    v(c.seed, "seed", "random seed of sampling (any 64-bit integer, as the server's 'seed'; "
                      "-1 = nondeterministic) and of --load-format dummy weights (a negative "
                      "seed: the fixed default weight seed 0)");
    v(c.ignore_eos, "ignore_eos", "keep generating after the end-of-sequence token");
    v(c.json, "json", "print one JSON object per prompt and line (prompt_token_ids, "
                      "token_ids, text, finish_reason, tokens_per_second) instead of text");
    CacheConfig::visit(c.cache, v);
    SchedulerConfig::visit(c.scheduler, v);
  }

  /// Throws std::invalid_argument naming the flag for a missing model, not exactly one prompt
  /// form (--prompt, --prompt-ids, --prompts-file), or values out of range.
  void validate() const;
};

/// Options of `octet bench latency`: prefill and decode tokens/s of one sequence.
struct BenchLatencyConfig {
  std::string model;
  std::string load_format = "auto";
  std::string tokenizer;
  int64_t seed = -1;
  std::string quantization = "auto";
  std::string weight_strategy = "channel";
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;
  MultiNodeConfig multinode;
  int64_t input_len = 128;
  int64_t output_len = 64;
  int64_t num_iters = 3;
  int64_t max_model_len = 0;  // 0 = input_len + output_len + 1
  bool json = false;
  CacheConfig cache;  // enable_prefix_caching is forced off (every run recomputes the prompt)

  // Added last, so that positional aggregate initialisation keeps its meaning.
  int64_t threads = 0;  // CPU worker threads; 0: from the affinity mask and cgroup quota
  std::string lm_head_dtype = "bf16";
  int64_t num_iters_warmup = 1;  // untimed runs first (vLLM's --num-iters-warmup)

  template <class Visitor>
  static void visit(BenchLatencyConfig& c, Visitor&& v) {
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
    v(c.input_len, "input_len", "prompt tokens per prefill (random ids)");
    v(c.output_len, "output_len", "greedy decode steps after the prefill");
    v(c.num_iters, "num_iters", "repetitions; the best run is reported");
    v(c.num_iters_warmup, "num_iters_warmup",
      "untimed runs before the --num-iters timed ones (first-touch page faults, scratch "
      "buffers growing)");
    v(c.max_model_len, "max_model_len",
      "the engine's max_model_len, which the KV budget must hold once (0 = input_len + "
      "output_len + 1)");
    v(c.json, "json", "print one JSON object");
    CacheConfig::visit(c.cache, v);
  }

  void validate() const;
};

/// Options of `octet perplexity`.
struct PerplexityConfig {
  std::string model;
  std::string load_format = "auto";
  std::string tokenizer;
  std::string text;
  std::string quantization = "auto";
  std::string weight_strategy = "channel";
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;
  MultiNodeConfig multinode;
  int64_t max_tokens = 2048;
  bool compare = false;
  bool json = false;
  // KV cache mode: score through the paged engine with this dtype against bf16 KV.
  std::string kv_cache_dtype;
  std::string kv_cache_dtype_skip_layers;
  std::string kv_scales_path;
  bool calculate_kv_scales = false;

  // Added last, so that positional aggregate initialisation keeps its meaning.
  int64_t threads = 0;  // CPU worker threads; 0: from the affinity mask and cgroup quota
  std::string lm_head_dtype = "bf16";
  std::string kv_cache_rotation = "none";

  template <class Visitor>
  static void visit(PerplexityConfig& c, Visitor&& v) {
    v(c.model, "model", "GGUF file or Hugging Face checkpoint directory (required)");
    v(c.load_format, "load_format", kLoadFormatHelp);
    v(c.tokenizer, "tokenizer", kTokenizerHelp);
    v(c.text, "text", "text file to score (standard corpus: /usr/share/common-licenses/GPL-3)");
    v(c.quantization, "quantization", kQuantizationHelp);
    v(c.weight_strategy, "weight_strategy", kWeightStrategyHelp);
    v(c.device, "device", kDeviceHelp);
    v(c.tensor_parallel_size, "tensor_parallel_size", kTensorParallelSizeHelp);
    MultiNodeConfig::visit(c.multinode, v);
    v(c.threads, "threads", kThreadsHelp);
    v(c.lm_head_dtype, "lm_head_dtype", kLmHeadDtypeHelp);
    v(c.max_tokens, "max_tokens", "tokens scored from the start of the text");
    v(c.compare, "compare", "also run the unquantized model on the same tokens and print the "
                            "KL divergence and top-1 agreement of the next-token distributions");
    v(c.json, "json", "print one JSON object");
    v(c.kv_cache_dtype, "kv_cache_dtype",
      "score through the paged KV cache in this dtype (bf16, fp16, fp8, fp8_e4m3, fp8_e5m2) "
      "and compare with bf16 KV: perplexity, top-1 agreement, logprob change");
    v(c.kv_cache_dtype_skip_layers, "kv_cache_dtype_skip_layers",
      "with --kv-cache-dtype: layers kept in bf16 (indices and/or sliding_window)");
    v(c.kv_scales_path, "kv_scales_path", "with --kv-cache-dtype: JSON KV scales file");
    v(c.calculate_kv_scales, "calculate_kv_scales",
      "with --kv-cache-dtype: FP8 scales from the built-in calibration text");
    v(c.kv_cache_rotation, "kv_cache_rotation",
      "with --kv-cache-dtype: none or hadamard (q and k rotated per head before the KV write; "
      "the bf16 baseline runs without rotation)");
  }
  void validate() const;
};

/// Options of `octet quantize`: writes an FP8_DYNAMIC compressed-tensors checkpoint (weights
/// per output channel, as that scheme defines).
struct QuantizeConfig {
  std::string model;
  std::string output;

  template <class Visitor>
  static void visit(QuantizeConfig& c, Visitor&& v) {
    v(c.model, "model", "input: unquantized Hugging Face checkpoint directory (required)");
    v(c.output, "output", "output directory, created; must not hold a checkpoint (required)");
  }
  void validate() const;
};

}  // namespace octet
