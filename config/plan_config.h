#pragma once
// Options of `octet plan` (capacity and decode floors, bench/plan.h), each declared once.
#include <cstdint>
#include <string>

namespace octet {

struct PlanConfig {
  std::string model;                    // preset, config.json, HF directory or GGUF
  std::string device = "h100-sxm-80gb"; // preset or cpu
  std::string weight_dtype = "fp8";     // bf16 | fp8
  std::string kv_cache_dtype = "fp8";   // auto | bf16 | fp16 | fp8 | fp8_e4m3 | fp8_e5m2
  std::string kv_cache_dtype_skip_layers;  // "0,5" or "sliding_window"
  int64_t tensor_parallel_size = 1;
  int64_t max_model_len = 0;            // 0 = the model's max_position_embeddings
  int64_t batch_size = 1;
  double gpu_memory_utilization = 0.9;
  double reserved_memory_gib = 1.0;     // activations and runtime per device
  double device_memory_gib = 0;         // 0 = the preset's (cpu: MemTotal)
  double bandwidth_gbs = 0;             // GB/s; 0 = the preset's (cpu: measured)
  bool json = false;

  template <class Visitor>
  static void visit(PlanConfig& c, Visitor&& v) {
    v(c.model, "model",
      "llama-3.1-8b, llama-3.1-70b, llama-3.3-70b, qwen2.5-7b, smollm2-135m, a config.json, a "
      "Hugging Face directory or a GGUF file (required)");
    v(c.device, "device", "h100-sxm-80gb, h200-141gb, a100-80gb, l40s or cpu");
    v(c.weight_dtype, "weight_dtype", "bf16 or fp8 (the pair marked in the output)");
    v(c.kv_cache_dtype, "kv_cache_dtype", "auto, bf16, fp16, fp8, fp8_e4m3 or fp8_e5m2");
    v(c.kv_cache_dtype_skip_layers, "kv_cache_dtype_skip_layers",
      "layers whose KV stays 16-bit under FP8: indices (0,5) or sliding_window");
    v(c.tensor_parallel_size, "tensor_parallel_size", "devices the model is split over");
    v(c.max_model_len, "max_model_len", "context per sequence (0 = the model's maximum)");
    v(c.batch_size, "batch_size", "sequences decoding together, each at --max-model-len");
    v(c.gpu_memory_utilization, "gpu_memory_utilization", "fraction of device memory used");
    v(c.reserved_memory_gib, "reserved_memory_gib",
      "GiB per device kept for activations and the runtime");
    v(c.device_memory_gib, "device_memory_gib", "device memory in GiB (0 = the preset's)");
    v(c.bandwidth_gbs, "bandwidth_gbs",
      "memory bandwidth in GB/s (0 = the preset's; cpu: measured)");
    v(c.json, "json", "print one JSON object");
  }

  /// Documented caps: --max-model-len <= 2^28 tokens (ModelConfig::kMaxPositions),
  /// --batch-size <= 2^20, --device-memory-gib and --reserved-memory-gib <= 2^20 GiB,
  /// --bandwidth-gbs <= 10^6 GB/s; floats finite.
  static constexpr int64_t kMaxModelLen = int64_t{1} << 28;
  static constexpr int64_t kMaxBatchSize = int64_t{1} << 20;
  static constexpr double kMaxMemoryGiB = double(1 << 20);
  static constexpr double kMaxBandwidthGBs = 1e6;

  /// Throws std::invalid_argument naming the flag for a missing model, an unknown device or
  /// dtype, or values out of range (beyond the caps above, negative, NaN or infinite).
  void validate() const;
  /// "bf16" or "fp8" for --kv-cache-dtype (auto and fp16 count as 16-bit).
  std::string kv_bits() const;
};

}  // namespace octet
