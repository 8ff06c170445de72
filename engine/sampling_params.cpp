#include "engine/sampling_params.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace octet {
namespace {

// Most top logprobs a request may ask for (OpenAI's top_logprobs limit, vLLM's max_logprobs).
constexpr int64_t kMaxLogprobs = 20;

[[noreturn]] void bad(const std::string& field, const std::string& rule, const std::string& got) {
  throw std::invalid_argument(field + " must be " + rule + ", got " + got);
}

void check_range(const char* field, float v, float lo, float hi) {
  if (!std::isfinite(v) || v < lo || v > hi)
    bad(field, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", std::to_string(v));
}

}  // namespace

// Ranges as vLLM's SamplingParams._verify_args (and OpenAI's documented limits).
void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    bad("temperature", "a finite number >= 0", std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p", "in (0, 1]", std::to_string(top_p));
  if (top_k < -1) bad("top_k", "-1 or 0 (disabled) or at least 1", std::to_string(top_k));
  check_range("min_p", min_p, 0.0f, 1.0f);
  check_range("presence_penalty", presence_penalty, -2.0f, 2.0f);
  check_range("frequency_penalty", frequency_penalty, -2.0f, 2.0f);
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
    bad("repetition_penalty", "a finite number > 0", std::to_string(repetition_penalty));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) bad("logit_bias token id", ">= 0", std::to_string(id));
    if (!std::isfinite(bias))
      bad("logit_bias[" + std::to_string(id) + "]", "finite", std::to_string(bias));
  }
  if (max_tokens < 0) bad("max_tokens", ">= 0", std::to_string(max_tokens));
  if (min_tokens < 0) bad("min_tokens", ">= 0", std::to_string(min_tokens));
  if (min_tokens > max_tokens)
    bad("min_tokens", "<= max_tokens (" + std::to_string(max_tokens) + ")",
        std::to_string(min_tokens));
  for (int32_t id : stop_token_ids)
    if (id < 0) bad("stop_token_ids entry", ">= 0", std::to_string(id));
  for (const std::string& s : stop)
    if (s.empty()) bad("stop", "non-empty strings", "an empty string");
  if (logprobs < -1 || logprobs > kMaxLogprobs)
    bad("logprobs", "-1 (none) or in [0, " + std::to_string(kMaxLogprobs) + "]",
        std::to_string(logprobs));
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxLogprobs)
    bad("prompt_logprobs", "-1 (none) or in [0, " + std::to_string(kMaxLogprobs) + "]",
        std::to_string(prompt_logprobs));
}

}  // namespace octet
