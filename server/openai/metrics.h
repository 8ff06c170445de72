#pragma once
// /metrics: Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/). Every family vLLM defines
// (vllm/v1/metrics/loggers.py, PrometheusStatLogger) that octet can fill carries vLLM's name,
// type, labels (model_name, engine="0"), help text and histogram buckets under the `vllm:`
// prefix, so dashboards, autoscalers and the Gateway API Inference Extension's endpoint picker
// read octet as they read vLLM. octet's own series keep an `octet:` prefix: KV block counts,
// engine_alive, steps, per-layer KV dtype/scale gauges (Engine::kv_layers()) and the per-layer
// sampled FP8 clipping counters (EngineStats::kv_saturation).
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "engine/engine.h"
#include "engine/request_output.h"

namespace octet::server {

/// A Prometheus histogram: cumulative counts per upper bound (le), plus +Inf, sum and count.
/// Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<int64_t> cumulative_counts;  // [upper_bounds.size()], count of values <= bound
    int64_t count = 0;                       // the +Inf bucket
    double sum = 0.0;
    /// The same histogram with only the bounds <= max_bound (cumulative counts are unchanged by
    /// dropping bounds, so this is exactly the histogram those bounds would have recorded).
    Snapshot up_to(double max_bound) const;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  int64_t count_ = 0;
  double sum_ = 0.0;
};

/// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
std::vector<double> ttft_buckets();             // seconds
std::vector<double> itl_buckets();              // seconds
std::vector<double> request_latency_buckets();  // seconds: e2e, queue, inference, prefill, decode
std::vector<double> iteration_tokens_buckets(); // tokens per engine step: 1, 8, 16, ..., 16384
std::vector<double> params_n_buckets();         // 1, 2, 5, 10, 20
std::vector<double> num_preemptions_buckets();  // 1, 2, 3, 4, 5, 10, 20
/// vLLM's build_1_2_5_buckets(max_value): 1, 2, 5, 10, 20, 50, ... while <= max_value.
std::vector<double> one_two_five_buckets(double max_value);

/// What the server records per request. Thread-safe. The token-count histograms hold vLLM's
/// 1-2-5 bounds up to 10^12 and are cut at max_model_len when rendered (vLLM's bounds).
struct ServerMetrics {
  Histogram time_to_first_token{ttft_buckets()};
  Histogram inter_token_latency{itl_buckets()};
  Histogram e2e_request_latency{request_latency_buckets()};
  Histogram request_queue_time{request_latency_buckets()};
  Histogram request_inference_time{request_latency_buckets()};
  Histogram request_prefill_time{request_latency_buckets()};
  Histogram request_decode_time{request_latency_buckets()};
  Histogram request_prompt_tokens{one_two_five_buckets(1e12)};
  Histogram request_generation_tokens{one_two_five_buckets(1e12)};
  Histogram request_params_max_tokens{one_two_five_buckets(1e12)};
  Histogram request_prefill_kv_computed_tokens{one_two_five_buckets(1e12)};  // prompt - cached
  Histogram request_params_n{params_n_buckets()};  // once per prompt of an API request
  Histogram request_num_preemptions{num_preemptions_buckets()};
  // vLLM's mean_time_per_output_token of each finished request: decode time / (generated - 1),
  // 0 with fewer than 2 tokens (the first token is the prefill's).
  Histogram request_time_per_output_token{itl_buckets()};

  /// Counts one finished engine request by finish reason ("stop", "length", "abort", "error").
  void record_finish(const std::string& finish_reason);
  /// Records an engine request's final output (out.finished): its finish reason ("error" when
  /// out.error is set), e2e latency, queue time and time per output token, and, once it
  /// produced a token, TTFT and prefill (first scheduled -> first token), decode (first token ->
  /// finished) and inference (first scheduled -> finished) times; prompt, generation and
  /// computed prompt (prompt minus prefix-cache hits) tokens, preemptions, and max_tokens when
  /// > 0.
  void record_finished_request(const RequestOutput& out);
  std::map<std::string, int64_t> finished() const;

  /// Counts one request refused at admission with 503 because --max-num-waiting requests
  /// already wait (vLLM's vllm:admission_rejections_total, reason "max_num_queued_reqs").
  void record_admission_rejection();
  int64_t admission_rejections() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> finished_;
  int64_t admission_rejections_ = 0;
};

/// What /metrics reads from the engine (all empty/zero while the model loads).
struct EngineMetricsView {
  EngineStats stats;
  std::vector<KVLayerInfo> kv_layers;
  int64_t max_model_len = 0;
  std::optional<CacheConfig> cache;  // as configured; set once the engine runs
};

/// Formats a sample value as Prometheus expects: integers without a fraction, other values
/// in the shortest form that round-trips, NaN and +-Inf as "NaN", "+Inf", "-Inf".
std::string format_value(double v);

/// A histogram bound as vLLM's prometheus_client writes its le label (floatToGoString):
/// 1 -> "1.0", 0.25 -> "0.25", 1e6 -> "1e+06", +Inf -> "+Inf".
std::string format_le(double v);

/// A float in its shortest round-tripping form (0.0123f -> "0.0123").
std::string format_float(float v);

/// Escapes a label value (backslash, double quote, newline).
std::string escape_label(const std::string& v);

/// The whole /metrics page. vllm: families carry model_name="<model_name>",engine="0"
/// (vllm:cache_config_info: its config labels and engine, as vLLM); octet: families carry
/// model_name.
std::string render_metrics(const std::string& model_name, const EngineMetricsView& engine,
                           const ServerMetrics& metrics);

}  // namespace octet::server
