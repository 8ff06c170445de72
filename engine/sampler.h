#pragma once
// Token sampling from one row of logits: greedy, temperature, top-p (nucleus; Holtzman et al.
// 2019, "The Curious Case of Neural Text Degeneration").
#include <cstdint>
#include <random>

#include "engine/sampling_params.h"

namespace octet {

/// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;

/// Index of the largest logit; the lowest index wins ties (as torch.argmax). logits: [vocab].
int32_t argmax(const float* logits, int64_t vocab);

/// Samples one token id from logits: [vocab]. temperature < kGreedyTemperature -> argmax. Otherwise
/// p = softmax(logits / temperature) in FP32, restricted to the smallest set of most likely
/// tokens whose mass reaches top_p, renormalised, and drawn with `rng` (one uniform draw).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     std::mt19937_64& rng);

}  // namespace octet
