#pragma once
// Per-request sampling parameters (names, defaults and semantics as vLLM's SamplingParams and
// OpenAI's API). Applied by engine/sampler.h (logits) and engine/detokenizer.h (stop strings);
// validate() is in sampling_params.cpp.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace octet {

struct SamplingParams {
  float temperature = 1.0f;  // 0 (or < 1e-5) = greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  int64_t top_k = 0;         // keep the k most likely tokens (ties at the k-th kept); 0/-1 = all
  float min_p = 0.0f;        // drop tokens with p < min_p * p_max; in [0, 1]
  int64_t seed = -1;         // -1 = nondeterministic; else the request's own RNG stream
  float presence_penalty = 0.0f;    // [-2, 2], subtracted once per token seen in the output
  float frequency_penalty = 0.0f;   // [-2, 2], subtracted per occurrence in the output
  float repetition_penalty = 1.0f;  // > 0; prompt + output tokens: logit > 0 ? l / p : l * p
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit of each token id
  int64_t max_tokens = 16;   // tokens to generate, >= 0
  int64_t min_tokens = 0;    // EOS and stop_token_ids masked (even with ignore_eos, as vLLM) and
                             // a stop string must end in text of a later token
  bool ignore_eos = false;   // keep generating past EOS
  std::vector<int32_t> stop_token_ids;  // finish (reason "stop") after sampling one of these
  std::vector<std::string> stop;        // finish when the output text contains one (the first
                                        // to complete wins); the text ends before it
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;      // detokenized text omits special tokens
  int64_t logprobs = -1;         // -1 = none; k in [0, 20]: the sampled token's raw logprob and
                                 // rank + the top k (engine/sampler.h)
  int64_t prompt_logprobs = -1;  // -1 = none; k in [0, 20]: each prompt token's logprob + top k

  /// Throws std::invalid_argument naming the field for an out-of-range value (temperature < 0
  /// or not finite, top_p outside (0, 1], top_k < -1, min_p outside [0, 1], penalties out of
  /// range or not finite, repetition_penalty <= 0, max_tokens or min_tokens < 0, min_tokens >
  /// max_tokens, logprobs or prompt_logprobs < -1 or > 20, an empty stop string, a non-finite
  /// logit_bias, a negative logit_bias or stop_token_ids id). Ids beyond the vocabulary:
  /// validate_token_ids() in engine/sampler.h.
  void validate() const;
};

}  // namespace octet
