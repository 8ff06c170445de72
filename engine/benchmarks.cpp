#include "engine/benchmarks.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/engine.h"
#include "kernels/kernel_bench.h"

namespace octet {

std::string kernel_benchmark_table(int64_t m_max) { return run_kernel_benchmark(m_max); }

double read_bandwidth_gbs() { return measure_read_bandwidth_gbs(); }

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
  const double prefill_s = last.first_token_time_s - last.queue_time_s;
  const double decode_s = last.e2e_time_s - last.first_token_time_s;
  r.prefill_tokens_per_second = prefill_s > 0 ? static_cast<double>(r.input_len) / prefill_s : 0;
  r.decode_tokens_per_second = decode_s > 0 ? static_cast<double>(r.output_len) / decode_s : 0;
  return r;
}

}  // namespace octet
