#include "config/plan_config.h"

#include <stdexcept>
#include <string>

namespace octet {

std::string PlanConfig::kv_bits() const {
  return kv_cache_dtype.rfind("fp8", 0) == 0 ? "fp8" : "bf16";
}

void PlanConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  if (device != "h100-sxm-80gb" && device != "h200-141gb" && device != "a100-80gb" &&
      device != "l40s" && device != "cpu")
    throw std::invalid_argument("--device must be h100-sxm-80gb, h200-141gb, a100-80gb, l40s or "
                                "cpu, got '" + device + "'");
  if (weight_dtype != "bf16" && weight_dtype != "fp8")
    throw std::invalid_argument("--weight-dtype must be bf16 or fp8, got '" + weight_dtype + "'");
  const std::string& k = kv_cache_dtype;
  if (k != "auto" && k != "bf16" && k != "fp16" && k != "fp8" && k != "fp8_e4m3" && k != "fp8_e5m2")
    throw std::invalid_argument("--kv-cache-dtype must be auto, bf16, fp16, fp8, fp8_e4m3 or "
                                "fp8_e5m2, got '" + k + "'");
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64)
    throw std::invalid_argument("--tensor-parallel-size must be in [1, 64]");
  if (max_model_len < 0 || max_model_len > kMaxModelLen)
    throw std::invalid_argument("--max-model-len must be in [0, " + std::to_string(kMaxModelLen) +
                                "], got " + std::to_string(max_model_len));
  if (batch_size < 1 || batch_size > kMaxBatchSize)
    throw std::invalid_argument("--batch-size must be in [1, " + std::to_string(kMaxBatchSize) +
                                "], got " + std::to_string(batch_size));
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
    throw std::invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  // !(x >= 0 && x <= max) also rejects NaN.
  if (!(reserved_memory_gib >= 0 && reserved_memory_gib <= kMaxMemoryGiB))
    throw std::invalid_argument("--reserved-memory-gib must be in [0, 1048576]");
  if (!(device_memory_gib >= 0 && device_memory_gib <= kMaxMemoryGiB))
    throw std::invalid_argument("--device-memory-gib must be in [0, 1048576]");
  if (!(bandwidth_gbs >= 0 && bandwidth_gbs <= kMaxBandwidthGBs))
    throw std::invalid_argument("--bandwidth-gbs must be in [0, 1000000]");
}

}  // namespace octet
