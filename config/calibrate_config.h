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
  std::string kv_cache_rotation = "none";

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
    v(c.kv_cache_rotation, "kv_cache_rotation",
      "none, or hadamard: record the amax of Hadamard-rotated K (and Q), for serving with "
      "--kv-cache-rotation hadamard");
    v(c.chat, "chat", "render dataset conversations through the model's chat template");
    v(c.output, "output",
      "FILE.json: an octet scales file for --kv-scales-path; DIR: a compressed-tensors "
      "checkpoint with k_scale / v_scale tensors and kv_cache_scheme (HF models) (required)");
    v(c.headroom, "headroom",
      "scale = amax * headroom / fp8_max: values up to headroom x the calibration amax fit "
      "(1 = the overall amax maps to fp8_max; default 2 costs one of E4M3's ~15 binades at the "
      "bottom)");
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

struct KVReportConfig {
  std::string model;
  std::string text;
  std::string quantization = "auto";
  int64_t max_tokens = 512;
  std::string formats = "fp8_e4m3,fp8_e5m2";
  std::string sources = "unit,tensor,attn_head,per_token_head";
  int64_t query_stride = 4;
  double target_kl = 0.0;
  std::string recommend_for = "fp8_e4m3/tensor";
  bool json = false;
  std::string heatmap;
  std::string long_context;
  std::string kv_cache_dtype_skip_layers;
  bool builtin_text = false;

  template <class Visitor>
  static void visit(KVReportConfig& c, Visitor&& v) {
    v(c.model, "model", "GGUF file or Hugging Face checkpoint directory (required)");
    v(c.text, "text",
      "text file measured on (required unless --builtin-text; e.g. "
      "/usr/share/common-licenses/GPL-3; not the "
      "calibration text, or calibrated scales look better than they are)");
    v(c.quantization, "quantization", kQuantizationHelp);
    v(c.max_tokens, "max_tokens", "tokens of the text measured (from its start)");
    v(c.formats, "formats", "comma-separated FP8 formats: fp8_e4m3, fp8_e5m2");
    v(c.sources, "sources",
      "comma-separated scale sources: unit, tensor, attn_head, per_token_head");
    v(c.query_stride, "query_stride", "attention errors on every N-th query position");
    v(c.target_kl, "target_kl",
      "recommend the layers to keep in bf16 so that the KL of --recommend-for is <= this "
      "(nats; 0 = no recommendation)");
    v(c.recommend_for, "recommend_for", "variant the recommendation is for, format/source");
    v(c.json, "json", "print one JSON object instead of the table");
    v(c.long_context, "long_context",
      "comma-separated context lengths for the long-context probe (a copy task: len/2 random "
      "tokens repeated), e.g. 512,1024,2048,4096,8192; accuracy for exact KV and every variant");
    v(c.kv_cache_dtype_skip_layers, "kv_cache_dtype_skip_layers",
      "also measure every variant with these layers kept in bf16, as the serve flag spells "
      "them (indices and/or sliding_window, e.g. sliding_window): one more row per variant");
    v(c.builtin_text, "builtin_text",
      "measure on the built-in calibration text instead of --text (what --calculate-kv-scales "
      "and the tensor/attn_head scales are computed on, so those look better there)");
    v(c.heatmap, "heatmap",
      "PNG file: layer x KV head heatmap of the attention-output error "
      "(needs gnuplot)");
  }
  void validate() const;
};

}  // namespace octet
