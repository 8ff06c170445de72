#pragma once
// The printed result table and the result JSON of `octet bench serve`, in vLLM's layout
// (vllm/benchmarks/serve.py: a 50-column title line, 40-column labels, the same row names in
// the same order) and with its result keys, so results compare line by line.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"

namespace octet::bench {

/// What the report says about how the run was driven.
struct RunInfo {
  std::optional<int64_t> max_concurrency;  // absent = unlimited
  double request_rate = 0;                 // req/s; infinity = all at once
  double duration_s = 0;                   // the benchmark's wall time
  std::vector<std::string> percentile_metrics;  // of ttft, tpot, itl, e2el
  std::vector<double> percentiles;              // e.g. {99}
  bool goodput = false;                         // --goodput given
};

/// The table vLLM prints after a run, ending with a line of 50 '='.
std::string format_table(const BenchmarkMetrics& m, const RunInfo& run);

/// vLLM's result dictionary: duration, completed, failed, total_input_tokens,
/// total_output_tokens, request_throughput, request_goodput (null without --goodput),
/// output_throughput, total_token_throughput, input_lens, output_lens, ttfts, itls, latencies,
/// start_times, generated_texts, errors, max_output_tokens_per_s, max_concurrent_requests,
/// and for each selected metric mean_/median_/std_/p<N>_<metric>_ms. Times of the per-request
/// lists in seconds.
nlohmann::json result_json(const BenchmarkMetrics& m, const RunInfo& run,
                           const std::vector<RequestRecord>& records);

/// "99" for 99.0, "99.9" for 99.9 (vLLM's p_word).
std::string percentile_word(double p);

}  // namespace octet::bench
