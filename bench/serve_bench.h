#pragma once
// One `octet bench serve` run end to end: check the server (GET /v1/models), build the dataset,
// send the warm-ups, then the benchmark, and compute vLLM's metrics. Shared by `bench serve` and
// `bench sweep`.
#include <ostream>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/report.h"
#include "config/bench_serve_config.h"

namespace octet::bench {

struct ServeBenchResult {
  std::string model;                   // the model name the requests named
  BenchmarkMetrics metrics;
  RunInfo run;
  std::vector<RequestRecord> records;  // one per benchmark request, in dataset order
};

/// Runs the benchmark `cfg` describes; progress lines go to `log` (and a progress bar to stderr
/// when it is a terminal, unless --disable-tqdm). Throws std::invalid_argument for bad options
/// and std::runtime_error when the server cannot be reached, is not an OpenAI-compatible server
/// (GET /v1/models is not 200 with a model list), or the tokenizer cannot be found. Failed
/// benchmark requests are counted, never thrown.
ServeBenchResult run_serve_bench(const BenchServeConfig& cfg, std::ostream& log);

}  // namespace octet::bench
