#include "engine/sampling_params.h"

#include <charconv>
#include <cmath>
#include <sstream>
#include <string>

namespace octet {
namespace {

// The shortest text that reads back as v (so 1.0000001 is not shown as 1).
std::string fmt(float v) {
  char buf[48];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// Throws "'<field>' must be <rule>, got <got>" naming `param` (the request field).
[[noreturn]] void bad(const std::string& param, const std::string& field, const std::string& rule,
                      const std::string& got) {
  throw SamplingParamError(param, "'" + field + "' must be " + rule + ", got " + got);
}
[[noreturn]] void bad(const std::string& field, const std::string& rule, const std::string& got) {
  bad(field, field, rule, got);
}

/// v in [lo, hi] (NaN fails).
void check_range(const char* field, float v, float lo, float hi) {
  if (!(v >= lo && v <= hi)) bad(field, "in [" + fmt(lo) + ", " + fmt(hi) + "]", fmt(v));
}

}  // namespace

// Ranges as vLLM's SamplingParams._verify_args (and OpenAI's documented limits), tightened
// where the sampler's arithmetic needs it (sampling_params.h).
void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    bad("temperature", "a finite number >= 0", fmt(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p", "in (0, 1]", fmt(top_p));
  if (top_k < -1 || top_k > kMaxTopK)
    bad("top_k", "-1 or 0 (disabled) or in [1, " + std::to_string(kMaxTopK) + "]",
        std::to_string(top_k));
  check_range("min_p", min_p, 0.0f, 1.0f);
  check_range("presence_penalty", presence_penalty, -2.0f, 2.0f);
  check_range("frequency_penalty", frequency_penalty, -2.0f, 2.0f);
  check_range("repetition_penalty", repetition_penalty, kMinRepetitionPenalty,
              kMaxRepetitionPenalty);
  if (logit_bias.size() > kMaxLogitBiasEntries)
    bad("logit_bias", "at most " + std::to_string(kMaxLogitBiasEntries) + " entries",
        std::to_string(logit_bias.size()));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) bad("logit_bias", "logit_bias token id", ">= 0", std::to_string(id));
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias))
      bad("logit_bias", "logit_bias[" + std::to_string(id) + "]",
          "in [" + fmt(-kMaxLogitBias) + ", " + fmt(kMaxLogitBias) + "]", fmt(bias));
  }
  if (max_tokens < 0) bad("max_tokens", ">= 0", std::to_string(max_tokens));
  if (min_tokens < 0) bad("min_tokens", ">= 0", std::to_string(min_tokens));
  if (min_tokens > max_tokens)
    bad("min_tokens", "<= max_tokens (" + std::to_string(max_tokens) + ")",
        std::to_string(min_tokens));
  if (stop_token_ids.size() > kMaxStopTokenIds)
    bad("stop_token_ids", "at most " + std::to_string(kMaxStopTokenIds) + " ids",
        std::to_string(stop_token_ids.size()));
  for (int32_t id : stop_token_ids)
    if (id < 0) bad("stop_token_ids", "stop_token_ids entries", ">= 0", std::to_string(id));
  if (stop.size() > kMaxStopStrings)
    bad("stop", "at most " + std::to_string(kMaxStopStrings) + " strings",
        std::to_string(stop.size()));
  for (const std::string& s : stop) {
    if (s.empty()) bad("stop", "non-empty strings", "an empty string");
    if (s.size() > kMaxStopStringBytes)
      bad("stop", "strings of at most " + std::to_string(kMaxStopStringBytes) + " bytes",
          "one of " + std::to_string(s.size()) + " bytes");
  }
  // The upper bound, the vocabulary size, is validate_token_ids()'s (engine/sampler.h).
  if (logprobs < -1) bad("logprobs", "-1 (none) or >= 0", std::to_string(logprobs));
  if (prompt_logprobs < -1)
    bad("prompt_logprobs", "-1 (none) or >= 0", std::to_string(prompt_logprobs));
  const StructuredOutputParams& so = structured_outputs;
  if (so.active()) {
    const std::string& f = so.field;
    if (so.spec.size() > kMaxStructuredSpecBytes)
      bad(f, f, "at most " + std::to_string(kMaxStructuredSpecBytes) + " bytes",
          std::to_string(so.spec.size()) + " bytes");
    if (so.kind == StructuredOutputKind::Choice && so.choice.empty())
      bad(f, f, "a non-empty list of choices", "an empty list");
    if (so.choice.size() > kMaxStructuredChoices)
      bad(f, f, "at most " + std::to_string(kMaxStructuredChoices) + " choices",
          std::to_string(so.choice.size()));
    size_t choice_bytes = 0;
    for (const std::string& c : so.choice) choice_bytes += c.size();
    if (choice_bytes > kMaxStructuredChoiceBytes)
      bad(f, f, "choices of at most " + std::to_string(kMaxStructuredChoiceBytes) + " bytes in all",
          std::to_string(choice_bytes) + " bytes");
  }
}

}  // namespace octet
