// The result table and JSON of `octet bench serve` in vLLM's layout and keys
// (vllm/benchmarks/serve.py): rows, widths and order checked line by line against lines that
// Python's str.format("{:<40} {:<10.2f}") and "{s:{c}^{n}}" print.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "bench/report.h"

using namespace octet::bench;

namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

BenchmarkMetrics sample() {
  BenchmarkMetrics m;
  m.completed = 3;
  m.failed = 1;
  m.total_input = 60;
  m.total_output = 7;
  m.request_throughput = 1.5;
  m.request_goodput = 0.5;
  m.output_throughput = 3.5;
  m.total_token_throughput = 33.5;
  m.ttft = {200, 200, 81.65, {{99, 298}}};
  m.tpot = {40, 40, 10, {{99, 49.8}}};
  m.itl = {35, 35, 11.18, {{99, 49.7}}};
  m.e2el = {246.667, 250, 44.97, {{99, 299}}};
  m.max_output_tokens_per_s = 6;
  m.max_concurrent_requests = 1;
  m.output_lens = {4, 2, 1, 0};
  return m;
}

}  // namespace

TEST_CASE("the table has vLLM's rows, 40-column labels and order") {
  RunInfo run;
  run.max_concurrency = 8;
  run.request_rate = 4;
  run.duration_s = 2.0;
  run.percentile_metrics = {"ttft", "tpot", "itl"};
  run.percentiles = {99};
  run.goodput = true;
  const std::vector<std::string> l = lines(format_table(sample(), run));
  const std::vector<std::string> expected = {
      "============ Serving Benchmark Result ============",
      "Successful requests:                     3         ",
      "Failed requests:                         1         ",
      "Maximum request concurrency:             8         ",
      "Request rate configured (RPS):           4.00      ",
      "Benchmark duration (s):                  2.00      ",
      "Total input tokens:                      60        ",
      "Total generated tokens:                  7         ",
      "Request throughput (req/s):              1.50      ",
      "Request goodput (req/s):                 0.50      ",
      "Output token throughput (tok/s):         3.50      ",
      "Peak output token throughput (tok/s):    6.00      ",
      "Peak concurrent requests:                1.00      ",
      "Total token throughput (tok/s):          33.50     ",
      "---------------Time to First Token----------------",
      "Mean TTFT (ms):                          200.00    ",
      "Median TTFT (ms):                        200.00    ",
      "P99 TTFT (ms):                           298.00    ",
      "-----Time per Output Token (excl. 1st token)------",
      "Mean TPOT (ms):                          40.00     ",
      "Median TPOT (ms):                        40.00     ",
      "P99 TPOT (ms):                           49.80     ",
      "---------------Inter-token Latency----------------",
      "Mean ITL (ms):                           35.00     ",
      "Median ITL (ms):                         35.00     ",
      "P99 ITL (ms):                            49.70     ",
      "==================================================",
  };
  CHECK(l == expected);
}

TEST_CASE("unlimited concurrency, infinite rate and no goodput drop their rows") {
  RunInfo run;
  run.request_rate = INFINITY;
  run.duration_s = 2.0;
  run.percentile_metrics = {"e2el"};
  run.percentiles = {50, 99.9};
  BenchmarkMetrics m = sample();
  m.e2el.percentiles_ms = {{50, 250}, {99.9, 299.9}};
  const std::string t = format_table(m, run);
  CHECK(t.find("Maximum request concurrency") == std::string::npos);
  CHECK(t.find("Request rate configured") == std::string::npos);
  CHECK(t.find("goodput") == std::string::npos);
  CHECK(t.find("TTFT") == std::string::npos);
  CHECK(t.find("----------------End-to-end Latency----------------\n") != std::string::npos);
  CHECK(t.find("P50 E2EL (ms):                           250.00    \n") != std::string::npos);
  CHECK(t.find("P99.9 E2EL (ms):                         299.90    \n") != std::string::npos);
}

TEST_CASE("the result JSON has vLLM's keys") {
  RunInfo run;
  run.request_rate = INFINITY;
  run.duration_s = 2.0;
  run.percentile_metrics = {"ttft", "itl"};
  run.percentiles = {99};
  std::vector<RequestRecord> recs(4);
  recs[0].ttft = 0.1;
  recs[0].itl = {0.02, 0.03};
  recs[3].error = "HTTP 500";
  const nlohmann::json j = result_json(sample(), run, recs);
  for (const char* k :
       {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
        "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
        "generated_texts", "errors", "max_output_tokens_per_s", "max_concurrent_requests",
        "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
        "median_itl_ms", "std_itl_ms", "p99_itl_ms"})
    CHECK(j.contains(k));
  CHECK(!j.contains("mean_tpot_ms"));  // not selected
  CHECK(j["request_goodput"].is_null());  // no --goodput
  CHECK(j["p99_ttft_ms"] == 298.0);
  CHECK(j["total_output_tokens"] == 7);
  CHECK(j["output_lens"] == nlohmann::json({4, 2, 1, 0}));
  CHECK(j["itls"][0] == nlohmann::json({0.02, 0.03}));
  CHECK(j["errors"][3] == "HTTP 500");
  CHECK(percentile_word(99.0) == "99");
  CHECK(percentile_word(99.9) == "99.9");
}
