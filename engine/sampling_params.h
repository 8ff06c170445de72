#pragma once
// Per-request sampling parameters (names and defaults as vLLM's SamplingParams / OpenAI's API).
#include <cstdint>

namespace octet {

struct SamplingParams {
  float temperature = 1.0f;  // 0 (or < 1e-5) = greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  int64_t seed = -1;         // -1 = nondeterministic
  int64_t max_tokens = 16;   // tokens to generate, >= 0
  bool ignore_eos = false;   // keep generating past EOS

  /// Throws std::invalid_argument naming the field for an out-of-range value
  /// (temperature < 0 or not finite, top_p outside (0, 1], max_tokens < 0).
  void validate() const;
};

}  // namespace octet
