// `octet bench structured` (structured_output_bench.h).
#include "engine/structured_output_bench.h"

#include <algorithm>
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
                                       int64_t max_tokens, int64_t rounds) {
  if (rounds < 1) throw std::invalid_argument("bench_structured: rounds must be >= 1");
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
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  for (int64_t c : concurrency) {
    StructuredItl row;
    row.concurrency = c;
    row.rounds = rounds;
    std::vector<double> plain_ms, json_ms, ratios;
    for (int64_t k = 0; k < rounds; ++k) {
      const std::string tag = std::to_string(c) + "_" + std::to_string(k);
      std::pair<double, int64_t> p, q;
      if (k % 2 == 0) {  // alternate the order: neither run always follows the other
        p = run_batch(engine, prompt, plain, c, "plain" + tag);
        q = run_batch(engine, prompt, json, c, "json" + tag);
      } else {
        q = run_batch(engine, prompt, json, c, "json" + tag);
        p = run_batch(engine, prompt, plain, c, "plain" + tag);
      }
      plain_ms.push_back(p.first);
      json_ms.push_back(q.first);
      ratios.push_back(p.first > 0 ? q.first / p.first : 0.0);
      row.tokens_unconstrained = p.second;
      row.tokens_json = q.second;
    }
    row.itl_ms_unconstrained = median(plain_ms);
    row.itl_ms_json = median(json_ms);
    row.ratio_median = median(ratios);
    row.ratio_min = *std::min_element(ratios.begin(), ratios.end());
    row.ratio_max = *std::max_element(ratios.begin(), ratios.end());
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
                        {"tokens_json", i.tokens_json},
                        {"rounds", i.rounds},
                        {"ratio_median", i.ratio_median},
                        {"ratio_min", i.ratio_min},
                        {"ratio_max", i.ratio_max}});
  return j.dump();
}

}  // namespace octet
