#pragma once
// Options of `octet calibrate` (FP8 KV cache scales from calibration text; engine/calibrate.h)
// and `octet kv-report`, each declared once (name, default, help).
#include <cstdint>
#include <string>

#include "config/generate_config.h"

namespace octet {

struct CalibrateConfig {
  std::string model;
  std::string dataset;
  int64_t num_samples = 64;
  int64_t max_seq_len = 2048;
  std::string strategy = "tensor";
  std::string kv_cache_dtype = "fp8_e4m3";
  bool chat = false;
  std::string output;
  double headroom = 2.0;
  std::string quantization = "none";
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;

  template <class Visitor>
  static void visit(CalibrateConfig& c, Visitor&& v) {
    v(c.model, "model", "GGUF file or Hugging Face checkpoint directory (required)");
    v(c.dataset, "dataset",
      "calibration text: JSON Lines ({\"text\"}, {\"messages\": [{role, content}]} or ShareGPT "
      "{\"conversations\": [{from, value}]} per line), a ShareGPT JSON array, or plain text; "
      "default: octet's built-in set (prose, code, numbers, chat turns, every special token)");
    v(c.num_samples, "num_samples", "at most this many samples (plain text: windows)");
    v(c.max_seq_len, "max_seq_len", "tokens per sample (plain text is cut into windows)");
    v(c.strategy, "strategy",
      "scale granularity, compressed-tensors kv_cache_scheme strategy: tensor (one k_scale / "
      "v_scale per layer) or attn_head (one per KV head)");
    v(c.kv_cache_dtype, "kv_cache_dtype", "FP8 format the scales are for: fp8_e4m3 or fp8_e5m2");
    v(c.chat, "chat", "render dataset conversations through the model's chat template");
    v(c.output, "output",
      "FILE.json: an octet scales file for --kv-scales-path; DIR: a compressed-tensors "
      "checkpoint with k_scale / v_scale tensors and kv_cache_scheme (HF models) (required)");
    v(c.headroom, "headroom",
      "scale = amax * headroom / fp8_max: values up to headroom x the calibration amax fit "
      "(1 = llm-compressor's minmax; default 2 costs one of E4M3's ~15 binades at the bottom)");
    v(c.quantization, "quantization",
      "linear layers of the calibration pass (default none: the unquantized model, as "
      "llm-compressor calibrates); auto / fp8 run the FP8 weights");
    v(c.device, "device", kDeviceHelp);
    v(c.tensor_parallel_size, "tensor_parallel_size", kTensorParallelSizeHelp);
  }
  /// Throws std::invalid_argument naming the flag for a missing --model / --output or values
  /// out of range.
  void validate() const;
};

}  // namespace octet
