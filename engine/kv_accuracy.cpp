#include "engine/kv_accuracy.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/engine.h"

namespace octet {

namespace {

// Prompt logprobs of `ids` (entry p: log p(ids[p] | ids[<p]) and the top-1 alternative).
std::vector<TokenLogprobs> score(Engine& engine, const std::vector<int32_t>& ids) {
  SamplingParams p;
  p.max_tokens = 0;
  p.prompt_logprobs = 1;
  auto stream = engine.add_request("kv-accuracy", ids, p);
  std::vector<TokenLogprobs> lp;
  while (auto o = stream->next()) {
    if (!o->error.empty()) throw std::runtime_error(o->error);
    if (!o->prompt_logprobs.empty()) lp = std::move(o->prompt_logprobs);
  }
  if (lp.size() != ids.size()) throw std::runtime_error("kv accuracy: missing prompt logprobs");
  return lp;
}

}  // namespace

KVAccuracyResult compare_kv_cache_dtype(const EngineArgs& args, const std::string& text,
                                        int64_t max_tokens) {
  if (max_tokens < 2) throw std::invalid_argument("--max-tokens must be at least 2");
  EngineArgs baseline = args;
  baseline.cache.kv_cache_dtype = "bf16";
  baseline.cache.kv_cache_rotation = "none";  // the same baseline with or without rotation
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> base;
  {
    auto engine = Engine::create(baseline);
    ids = engine->tokenizer().tokenize(text, /*add_special_tokens=*/true);
    ids.resize(std::min<size_t>(ids.size(), static_cast<size_t>(
                                                std::min(max_tokens, engine->max_model_len()))));
    if (ids.size() < 2) throw std::invalid_argument("the text has fewer than 2 tokens");
    base = score(*engine, ids);
  }
  auto engine = Engine::create(args);
  const std::vector<TokenLogprobs> test = score(*engine, ids);
  KVAccuracyResult r;
  r.kv_cache_dtype = args.cache.kv_cache_dtype;
  r.tokens = static_cast<int64_t>(ids.size());
  double nll = 0, base_nll = 0, diff = 0;
  int64_t agree = 0;
  const int64_t n = r.tokens - 1;  // predictions: positions 1 .. tokens - 1
  for (int64_t p = 1; p <= n; ++p) {
    nll -= test[p].logprob;
    base_nll -= base[p].logprob;
    const double d = std::fabs(static_cast<double>(test[p].logprob) - base[p].logprob);
    diff += d;
    r.max_abs_logprob_diff = std::max(r.max_abs_logprob_diff, d);
    agree += !test[p].top.empty() && !base[p].top.empty() &&
             test[p].top[0].first == base[p].top[0].first;
  }
  r.perplexity = std::exp(nll / n);
  r.baseline_perplexity = std::exp(base_nll / n);
  r.top1_agreement = static_cast<double>(agree) / n;
  r.mean_abs_logprob_diff = diff / n;
  return r;
}

}  // namespace octet
