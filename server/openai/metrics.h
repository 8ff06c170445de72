#pragma once
// /metrics: Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/) with vLLM's metric names
// (vllm/v1/metrics/loggers.py) under an `octet:` prefix: engine gauges and counters from
// Engine::stats(), request histograms recorded by the server, per-layer KV cache dtype and
// scale gauges from Engine::kv_layers(), and per-layer sampled FP8 clipping counters
// (EngineStats::kv_saturation: kv_cache_{sampled,saturated,underflow}_values_total with
// labels layer and tensor = k | v).
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

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
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  int64_t count_ = 0;
  double sum_ = 0.0;
};

/// vLLM's bucket boundaries (seconds).
std::vector<double> ttft_buckets();
std::vector<double> itl_buckets();
std::vector<double> request_latency_buckets();

/// What the server itself measures. Thread-safe.
struct ServerMetrics {
  Histogram time_to_first_token{ttft_buckets()};
  Histogram inter_token_latency{itl_buckets()};
  Histogram e2e_request_latency{request_latency_buckets()};
  Histogram request_queue_time{request_latency_buckets()};

  /// Counts one finished engine request by finish reason ("stop", "length", "abort").
  void record_finish(const std::string& finish_reason);
  std::map<std::string, int64_t> finished() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> finished_;
};

/// Formats a sample value as Prometheus expects: integers without a fraction, other values
/// in the shortest form that round-trips, NaN and +-Inf as "NaN", "+Inf", "-Inf".
std::string format_value(double v);

/// A float in its shortest round-tripping form (0.0123f -> "0.0123").
std::string format_float(float v);

/// Escapes a label value (backslash, double quote, newline).
std::string escape_label(const std::string& v);

/// The whole /metrics page. Every metric carries model_name="<model_name>".
std::string render_metrics(const std::string& model_name, const EngineStats& stats,
                           const std::vector<KVLayerInfo>& kv_layers,
                           const ServerMetrics& metrics);

}  // namespace octet::server
