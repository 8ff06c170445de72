#pragma once
// `octet bench structured`: what structured outputs cost on a loaded Engine: grammar compile
// time per JSON schema, the grammar bitmask's cost per constrained token, and the inter-token
// latency with and without a JSON schema at a few concurrencies (docs/structured_outputs.md).
#include <cstdint>
#include <string>
#include <vector>

namespace octet {

class Engine;

/// ITL of one concurrency: `concurrency` identical greedy requests at once, unconstrained and
/// constrained to the first schema, in `rounds` rounds that alternate which runs first. A run's
/// ITL: mean over requests of (e2e - first token) / (generated - 1), engine-thread timings.
/// itl_ms_*: the median over rounds; ratio_*: median, min and max of the rounds' json /
/// unconstrained ratios; tokens_*: generated tokens of one round, all requests.
struct StructuredItl {
  int64_t concurrency = 0;
  double itl_ms_unconstrained = 0.0;
  double itl_ms_json = 0.0;
  int64_t tokens_unconstrained = 0;
  int64_t tokens_json = 0;
  int64_t rounds = 0;
  double ratio_median = 0.0, ratio_min = 0.0, ratio_max = 0.0;
};

struct StructuredBenchResult {
  std::vector<double> compile_ms;  // per schema, in order: a cold compile (cache bypassed)
  double bitmask_fill_us = 0.0;    // mean xgrammar FillNextTokenBitmask per constrained token
  int64_t bitmask_fills = 0;       // constrained tokens measured
  double bitmask_apply_us = 0.0;   // mean apply_token_bitmask over the vocabulary, worst case
                                   // (every 32-token word mixed), 1000 runs
  std::vector<StructuredItl> itl;
};

/// Runs the benchmark on `engine` (idle; its KV cache must hold max(concurrency) sequences of
/// prompt + max_tokens). json_schemas: JSON-schema texts, at least one (the ITL runs use the
/// first). Prompt: the model's chat template is not applied; a fixed instruction asking for a
/// JSON object, tokenized with special tokens. Greedy, ignore_eos false. Throws
/// std::invalid_argument for no schema or a concurrency < 1, RequestError for a schema that
/// does not compile, std::runtime_error when the engine fails a request.
StructuredBenchResult bench_structured(Engine& engine, const std::vector<std::string>& json_schemas,
                                       const std::vector<int64_t>& concurrency = {1, 16},
                                       int64_t max_tokens = 64, int64_t rounds = 5);

/// The result as one JSON object: {"compile_ms": [...], "bitmask_fill_us", "bitmask_fills",
/// "bitmask_apply_us", "bitmask_us_per_token" (fill + apply), "itl": [{"concurrency",
/// "itl_ms_unconstrained", "itl_ms_json", "tokens_unconstrained", "tokens_json", "rounds",
/// "ratio_median", "ratio_min", "ratio_max"}]}.
std::string structured_bench_json(const StructuredBenchResult& r);

}  // namespace octet
