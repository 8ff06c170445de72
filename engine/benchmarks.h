#pragma once
// Benchmark helpers the `octet bench` commands print: the kernel table, the memory bandwidth,
// and the one-sequence latency run through the Engine.
#include <cstdint>
#include <string>

#include "config/engine_args.h"

namespace octet {

class Engine;

/// The W8A8 vs FP32 kernel table for SmolLM2's linear shapes (kernels/kernel_bench.h).
std::string kernel_benchmark_table(int64_t m_max);

/// Measured memory read bandwidth, GB/s (256 MiB read by the kernels' threads, best of 10).
double read_bandwidth_gbs();

/// The CPU's W8A8 kernel, as the start-up log's device line names it (kernels/cpu/w8a8.h).
std::string cpu_w8a8_kernel();

/// `octet bench kernels --device D --json`: the device figures of kernels/kernel_bench.h
/// (measure_kernel_figures) as one JSON object, keys in docs/benchmarks.md ("Device figures").
/// A figure that could not be measured is the string "n/a (reason)". Throws as
/// measure_kernel_figures (std::invalid_argument: unknown or unavailable device).
std::string kernel_figures_json(const std::string& device);

/// The bandwidth bench latency's floor divides by: the device-to-device copy (read + write,
/// source "d2d_copy_read_write") on CUDA, read_bandwidth_gbs() (source "cpu_read") on the CPU
/// (kernel_bench.h measure_device_bandwidth_gbs). Throws std::invalid_argument for an unknown
/// or unavailable device.
struct DeviceBandwidth {
  double gbs = 0.0;
  std::string source;
};
DeviceBandwidth device_bandwidth(const std::string& device);

/// Prefill and decode throughput of one sequence (batch 1), from `bench latency`.
struct LatencyResult {
  int64_t input_len = 0;   // prompt tokens the prefill computed (the request's count)
  int64_t output_len = 0;  // decode steps run after the prefill (generated tokens - 1)
  std::string linear_format;
  int64_t decode_weight_bytes = 0;  // read per decode step
  int64_t kv_bytes_per_token = 0;   // KV cache bytes per token of context, all layers
  double prefill_tokens_per_second = 0.0;
  double decode_tokens_per_second = 0.0;
};

/// EngineArgs for bench_latency on `model`: one sequence, the whole prompt in one step
/// (max_num_batched_tokens >= input_len), no prefix cache (repeated runs must recompute the
/// prompt), max_model_len input_len + output_len + 1 (the prefill samples the first token, each
/// decode step one more).
EngineArgs latency_engine_args(const std::string& model, const std::string& quantization,
                               const std::string& weight_strategy, int64_t input_len,
                               int64_t output_len);

/// One timed run through `engine` (made from latency_engine_args): a prompt of input_len random
/// ids (fixed seed), then output_len greedy decode steps ignoring EOS. Prefill tokens/s =
/// input_len / (first token - first scheduled); decode tokens/s = output_len / (last token -
/// first token), both measured on the engine thread. Throws std::invalid_argument when
/// input_len or output_len is not positive, RequestError when they do not fit the engine's
/// max_model_len, std::runtime_error when the engine fails the request.
LatencyResult bench_latency(Engine& engine, int64_t input_len, int64_t output_len);

}  // namespace octet
