// `octet bench structured` (structured_output_bench.h).
#include "engine/structured_output_bench.h"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/sampler.h"

namespace octet {
namespace {

constexpr const char* kPrompt =
    "Describe a fictional person as a JSON object with their name, age and city.\n";

/// Runs `n` identical requests at once; mean ITL (ms) over them and the tokens generated.
std::pair<double, int64_t> run_batch(Engine& engine, const std::vector<int32_t>& prompt,
                                     const SamplingParams& p, int64_t n, const std::string& tag) {
  std::vector<NewRequest> reqs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    reqs[i].request_id = "bench-structured-" + tag + "-" + std::to_string(i);
    reqs[i].prompt_token_ids = prompt;
    reqs[i].params = p;
  }
  auto streams = engine.add_requests(std::move(reqs));
  double itl_sum = 0.0;
  int64_t counted = 0, tokens = 0;
  for (auto& s : streams) {
    RequestOutput last;
    while (auto out = s->next()) {
      if (!out->error.empty()) throw std::runtime_error("bench structured: " + out->error);
      if (out->finished) last = std::move(*out);
    }
    tokens += last.num_generated_tokens;
    if (last.num_generated_tokens < 2) continue;
    itl_sum += 1e3 * (last.e2e_time_s - last.first_token_time_s) /
               static_cast<double>(last.num_generated_tokens - 1);
    ++counted;
  }
  return {counted ? itl_sum / static_cast<double>(counted) : 0.0, tokens};
}

double apply_us(int64_t vocab) {
  std::vector<float> row(static_cast<size_t>(vocab), 0.5f);
  std::vector<int32_t> mask(static_cast<size_t>((vocab + 31) / 32),
                            static_cast<int32_t>(0x55555555));
  constexpr int kRuns = 1000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) {
    row[static_cast<size_t>(i % vocab)] = 0.5f;  // keep the row live between runs
    apply_token_bitmask(row.data(), vocab, mask.data());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 1e6 * s / kRuns;
}

}  // namespace

StructuredBenchResult bench_structured(Engine& engine, const std::vector<std::string>& json_schemas,
                                       const std::vector<int64_t>& concurrency,
                                       int64_t max_tokens) {
  if (json_schemas.empty()) throw std::invalid_argument("bench structured: no JSON schema given");
  for (int64_t c : concurrency)
    if (c < 1) throw std::invalid_argument("bench structured: concurrency must be >= 1");
  StructuredBenchResult r;
  for (const std::string& schema : json_schemas) {
    StructuredOutputParams so;
    so.kind = StructuredOutputKind::Json;
    so.spec = schema;
    so.field = "json_schema";
    r.compile_ms.push_back(engine.compile_structured_output(so));
  }
  const std::vector<int32_t> prompt = engine.tokenizer().tokenize(kPrompt, true);
  SamplingParams plain;
  plain.temperature = 0.0f;
  plain.max_tokens = max_tokens;
  SamplingParams json = plain;
  json.structured_outputs.kind = StructuredOutputKind::Json;
  json.structured_outputs.spec = json_schemas.front();
  json.structured_outputs.field = "json_schema";
  const EngineStats before = engine.stats();
  for (int64_t c : concurrency) {
    StructuredItl row;
    row.concurrency = c;
    std::tie(row.itl_ms_unconstrained, row.tokens_unconstrained) =
        run_batch(engine, prompt, plain, c, "plain" + std::to_string(c));
    std::tie(row.itl_ms_json, row.tokens_json) =
        run_batch(engine, prompt, json, c, "json" + std::to_string(c));
    r.itl.push_back(row);
  }
  const EngineStats after = engine.stats();
  r.bitmask_fills = after.num_bitmask_fills - before.num_bitmask_fills;
  if (r.bitmask_fills > 0)
    r.bitmask_fill_us =
        1e6 * (after.bitmask_fill_s - before.bitmask_fill_s) / static_cast<double>(r.bitmask_fills);
  r.bitmask_apply_us = apply_us(engine.vocab_size());
  return r;
}

std::string structured_bench_json(const StructuredBenchResult& r) {
  nlohmann::json j;
  j["compile_ms"] = r.compile_ms;
  j["bitmask_fill_us"] = r.bitmask_fill_us;
  j["bitmask_fills"] = r.bitmask_fills;
  j["bitmask_apply_us"] = r.bitmask_apply_us;
  j["bitmask_us_per_token"] = r.bitmask_fill_us + r.bitmask_apply_us;
  j["itl"] = nlohmann::json::array();
  for (const StructuredItl& i : r.itl)
    j["itl"].push_back({{"concurrency", i.concurrency},
                        {"itl_ms_unconstrained", i.itl_ms_unconstrained},
                        {"itl_ms_json", i.itl_ms_json},
                        {"tokens_unconstrained", i.tokens_unconstrained},
                        {"tokens_json", i.tokens_json}});
  return j.dump();
}

}  // namespace octet
