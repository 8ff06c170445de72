#pragma once
// Serving-benchmark metrics with vLLM's definitions (vllm/benchmarks/serve.py,
// calculate_metrics), computed from per-request records so that they can be checked exactly
// without sockets. Times are seconds on one monotonic clock; the *_ms fields are milliseconds.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace octet::bench {

/// What one request gave the client (vLLM's RequestFuncOutput).
struct RequestRecord {
  bool success = false;
  std::string error;            // why it failed ("" when it succeeded)
  double start_time = 0;        // when the request was sent, seconds
  double ttft = 0;              // send -> first chunk that carries text, seconds
  std::vector<double> itl;      // every gap between consecutive text chunks, seconds
  double latency = 0;           // E2EL: send -> last text chunk, seconds
  int64_t prompt_len = 0;       // prompt tokens (the server's usage.prompt_tokens when given)
  int64_t output_tokens = 0;    // usage.completion_tokens; 0 = unknown (re-tokenized)
  std::string generated_text;
  double client_queue_time = 0; // waiting for a --max-concurrency slot, seconds
};

/// Service-level objectives of goodput, milliseconds (absent = not checked).
struct GoodputSlo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

/// Mean, median, population standard deviation and the requested percentiles, milliseconds.
struct MetricStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (percentile, value)
};

struct BenchmarkMetrics {
  int64_t completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;  // tokens of the successful requests (saturate
                                              // at INT64_MAX, never wrap)
  double request_throughput = 0;     // completed / duration, req/s
  double request_goodput = 0;        // requests meeting every SLO / duration, req/s
  double output_throughput = 0;      // total_output / duration, tok/s
  double total_token_throughput = 0; // (total_input + total_output) / duration, tok/s
  MetricStats ttft, tpot, itl, e2el;
  double max_output_tokens_per_s = 0;   // busiest 1-second bucket of token arrivals
  int64_t max_concurrent_requests = 0;  // peak of requests in flight ([start, end) intervals)
  std::vector<int64_t> output_lens;     // per request; 0 for a failed one
};

/// numpy.percentile's default (linear interpolation between closest ranks) of `values`, p in
/// [0, 100]; 0 for an empty list (as vLLM's `np.percentile(xs or 0, p)`).
double percentile(std::vector<double> values, double p);

/// Statistics of `values_s` (seconds) in milliseconds; all zero for an empty list.
MetricStats metric_stats(const std::vector<double>& values_s, const std::vector<double>& percentiles);

/// vLLM's calculate_metrics over `records` and the benchmark's wall time `duration_s`:
/// output tokens from usage, else count_tokens(generated_text) (or 1 without a counter);
/// TPOT per request = (E2EL - TTFT) / (output tokens - 1) for requests with more than one token
/// (goodput treats the others' TPOT as 0); ITL pools every gap of every request; failed requests
/// count in `failed` only. Peak output tokens/s: token arrival times (start + ttft, then + each
/// ITL) in 1-second buckets from the earliest start. Throws std::invalid_argument for a
/// non-positive duration.
BenchmarkMetrics calculate_metrics(const std::vector<RequestRecord>& records, double duration_s,
                                   const std::function<int64_t(const std::string&)>& count_tokens,
                                   const std::vector<double>& percentiles,
                                   const GoodputSlo& goodput);

}  // namespace octet::bench
