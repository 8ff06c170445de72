#include "engine/benchmarks.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "kernels/backend.h"
#include "kernels/kernel_bench.h"

namespace octet {

namespace {

// A figure is its number, or its "n/a (reason)" string.
nlohmann::json to_json(const Figure& f) {
  return f.ok() ? nlohmann::json(f.value) : nlohmann::json(f.na);
}

nlohmann::json to_json(const std::map<std::string, Figure>& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, f] : m) j[k] = to_json(f);
  return j;
}

}  // namespace

std::string kernel_benchmark_table(int64_t m_max) { return run_kernel_benchmark(m_max); }

double read_bandwidth_gbs() { return measure_read_bandwidth_gbs(); }

std::string cpu_w8a8_kernel() { return cpu_w8a8_kernel_name(); }

DeviceBandwidth device_bandwidth(const std::string& device) {
  const bool cuda = resolve_device(device).rfind("cuda", 0) == 0;
  return {measure_device_bandwidth_gbs(device), cuda ? "d2d_copy_read_write" : "cpu_read"};
}

std::string kernel_figures_json(const std::string& device) {
  const KernelFigures f = measure_kernel_figures(device);
  nlohmann::json j;
  j["device"] = f.device;
  j["sizes"] = f.sizes;
  j["fp8_gemm_tflops"] = to_json(f.fp8_gemm_tflops);
  j["bf16_gemm_tflops"] = to_json(f.bf16_gemm_tflops);
  j["fp8_peak_tflops"] = to_json(f.fp8_peak_tflops);
  j["bf16_peak_tflops"] = to_json(f.bf16_peak_tflops);
  j["fp8_gemm_fraction_of_peak"] = to_json(f.fp8_gemm_fraction_of_peak);
  j["bf16_gemm_fraction_of_peak"] = to_json(f.bf16_gemm_fraction_of_peak);
  int64_t fallbacks = 0;
  j["gemm"] = nlohmann::json::array();
  for (const GemmFigure& g : f.gemm) {
    fallbacks += g.path == "simt_fallback";
    j["gemm"].push_back({{"shape", g.shape}, {"dtype", g.dtype}, {"m", g.m}, {"n", g.n},
                         {"k", g.k}, {"path", g.path}, {"ms", to_json(g.ms)},
                         {"tflops", to_json(g.tflops)}, {"weight_gbs", to_json(g.weight_gbs)}});
  }
  j["gemm_simt_fallbacks"] = fallbacks;
  j["d2d_copy_gbs"] = to_json(f.d2d_copy_gbs);
  j["attention"] = nlohmann::json::array();
  for (const AttentionFigure& a : f.attention)
    j["attention"].push_back({{"kv_dtype", a.kv_dtype}, {"batch", a.batch},
                              {"context", a.context}, {"kv_bytes", a.kv_bytes},
                              {"ms", to_json(a.ms)}, {"gbs", to_json(a.gbs)},
                              {"fraction_of_copy", to_json(a.fraction_of_copy)}});
  j["attention_bandwidth_fraction"] = to_json(f.attention_bandwidth_fraction);
  j["attention_slope_ms_per_1k"] = to_json(f.attention_slope_ms_per_1k);
  j["attention_slope_ms_per_1k_32_layers"] = to_json(f.attention_slope_ms_per_1k_32_layers);
  j["fp8_over_bf16_attention_slope"] = to_json(f.fp8_over_bf16_attention_slope);
  const OuterVecFigure& o = f.fp8_outer_vec;
  j["fp8_outer_vec"] = {{"status", o.status},
                        {"m", o.m},
                        {"n", o.n},
                        {"k", o.k},
                        {"ms", to_json(o.ms)},
                        {"plain_ms", to_json(o.plain_ms)},
                        {"equal_fraction", to_json(o.equal_fraction)},
                        {"max_rel_diff", to_json(o.max_rel_diff)}};
  return j.dump();
}

EngineArgs latency_engine_args(const std::string& model, const std::string& quantization,
                               const std::string& weight_strategy, int64_t input_len,
                               int64_t output_len) {
  if (input_len <= 0 || output_len <= 0)
    throw std::invalid_argument("bench: input_len and output_len must be positive");
  EngineArgs a;
  a.model = model;
  a.quantization = quantization;
  a.weight_strategy = weight_strategy;
  a.cache.enable_prefix_caching = false;
  a.scheduler.max_num_seqs = 1;
  a.scheduler.max_num_batched_tokens = std::max(a.scheduler.max_num_batched_tokens, input_len);
  a.scheduler.max_model_len = input_len + output_len + 1;
  return a;
}

LatencyResult bench_latency(Engine& engine, int64_t input_len, int64_t output_len) {
  if (input_len <= 0 || output_len <= 0)
    throw std::invalid_argument("bench: input_len and output_len must be positive");
  std::vector<int32_t> ids(static_cast<size_t>(input_len));
  std::mt19937_64 rng(0);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(engine.vocab_size()));
  SamplingParams p;
  p.temperature = 0.0f;  // greedy
  p.ignore_eos = true;
  p.max_tokens = output_len + 1;  // the prefill's token, then one per decode step
  auto stream = engine.add_request("bench-latency", std::move(ids), p);
  RequestOutput last;
  while (auto out = stream->next()) {
    if (!out->error.empty()) throw std::runtime_error("bench: " + out->error);
    if (out->finished) last = std::move(*out);
  }
  if (last.finish_reason != "length")
    throw std::runtime_error("bench: the request ended with '" + last.finish_reason + "'");
  LatencyResult r;
  r.input_len = last.num_prompt_tokens;
  r.output_len = last.num_generated_tokens - 1;
  r.linear_format = engine.linear_format();
  r.decode_weight_bytes = engine.decode_weight_bytes();
  r.kv_bytes_per_token = engine.kv_bytes_per_token();
  const double prefill_s = last.first_token_time_s - last.queue_time_s;
  const double decode_s = last.e2e_time_s - last.first_token_time_s;
  r.prefill_tokens_per_second = prefill_s > 0 ? static_cast<double>(r.input_len) / prefill_s : 0;
  r.decode_tokens_per_second = decode_s > 0 ? static_cast<double>(r.output_len) / decode_s : 0;
  return r;
}

}  // namespace octet
