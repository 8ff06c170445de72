#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace octet {

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    throw std::invalid_argument("temperature must be a finite number >= 0, got " +
                                std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw std::invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (max_tokens < 0)
    throw std::invalid_argument("max_tokens must be >= 0, got " + std::to_string(max_tokens));
}

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     std::mt19937_64& rng) {
  // As vLLM: temperatures below 1e-5 are greedy (1/T would overflow the exponent).
  if (params.temperature < kGreedyTemperature) return argmax(logits, vocab);
  const float inv_t = 1.0f / params.temperature;
  const float mx = logits[argmax(logits, vocab)];
  std::vector<float> p(vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = std::exp((logits[i] - mx) * inv_t);
    sum += p[i];
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = vocab;
  if (params.top_p < 1.0f) {
    // Most likely first; ties by id so the order is deterministic.
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double mass = 0.0;
    const double target = params.top_p * sum;
    for (keep = 0; keep < vocab;) {
      mass += p[order[keep++]];
      if (mass >= target) break;
    }
    sum = mass;
  }
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * sum;
  double acc = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[order[i]];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace octet
