#pragma once
// Per-request sampling parameters (names, defaults and semantics as vLLM's SamplingParams and
// OpenAI's API). Applied by engine/sampler.h (logits) and engine/detokenizer.h (stop strings);
// validate() is in sampling_params.cpp.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/request_error.h"
#include "engine/structured_output.h"

namespace octet {

/// Bounds validate() enforces beyond vLLM's, so that the sampler's arithmetic stays finite:
/// - repetition_penalty in [1/100, 100]: it divides or multiplies a logit once, so a processed
///   logit is at most 100x a raw one; any raw logit below FLT_MAX / 100 (~3.4e36, far beyond the
///   |l| < 1e4 a trained model's lm_head gives) stays finite. vLLM only asks for > 0, which let
///   1e-40 turn logits into inf and then NaN.
/// - logit_bias values in OpenAI's [-100, 100]; presence / frequency penalties in [-2, 2]
///   (OpenAI), so penalties shift a logit by at most 2 + 2 * max_model_len.
/// - top_k at most kMaxTopK (any k >= the vocabulary keeps every token).
/// - temperature finite and >= 0: 1 / T > 0 for every finite T, and masked (-inf) logits are
///   dropped by comparisons that NaN also fails, so no upper bound is needed.
/// - at most kMaxStopStrings stop strings of at most kMaxStopStringBytes bytes each, at most
///   kMaxStopTokenIds stop_token_ids and kMaxLogitBiasEntries logit_bias entries: the engine
///   thread checks them for every token of every choice, so their number bounds the work one
///   request adds to every step (OpenAI allows 4 stop strings; vLLM has no cap).
/// The sampler still checks what it computes (engine/sampler.h): a non-finite logit fails the
/// one request, never the engine.
inline constexpr float kMinRepetitionPenalty = 0.01f;
inline constexpr float kMaxRepetitionPenalty = 100.0f;
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr int64_t kMaxTopK = 2147483647;  // token ids are int32
inline constexpr size_t kMaxStopStrings = 64;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr size_t kMaxStopTokenIds = 1024;
inline constexpr size_t kMaxLogitBiasEntries = 1024;

/// A SamplingParams field out of range: what() is the message ("'top_p' must be ..."),
/// field() (= param()) the request field it names (OpenAI / vLLM spelling, e.g. "top_p",
/// "logit_bias"). A RequestError of kind InvalidRequest.
class SamplingParamError : public RequestError {
 public:
  SamplingParamError(const std::string& field, const std::string& message)
      : RequestError(RequestErrorKind::InvalidRequest, message, field) {}
  const std::string& field() const { return param(); }
};

struct SamplingParams {
  float temperature = 1.0f;  // 0 (or < 1e-5) = greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  int64_t top_k = 0;         // keep the k most likely tokens (ties at the k-th kept); 0/-1 = all;
                             // at most kMaxTopK
  float min_p = 0.0f;        // drop tokens with p < min_p * p_max; in [0, 1]
  // none = nondeterministic; else the request's own RNG stream, seeded with the value's two's
  // complement (any int64 is a seed; the OpenAI server reads a request's -1 as none)
  std::optional<int64_t> seed;
  float presence_penalty = 0.0f;    // [-2, 2], subtracted once per token seen in the output
  float frequency_penalty = 0.0f;   // [-2, 2], subtracted per occurrence in the output
  float repetition_penalty = 1.0f;  // [0.01, 100]; prompt + output tokens: l > 0 ? l / p : l * p
  std::vector<std::pair<int32_t, float>> logit_bias;  // [-100, 100], added to each id's logit
  int64_t max_tokens = 16;   // tokens to generate, >= 0
  int64_t min_tokens = 0;    // EOS and stop_token_ids masked (even with ignore_eos, as vLLM) and
                             // a stop string must end in text of a later token
  bool ignore_eos = false;   // keep generating past EOS
  std::vector<int32_t> stop_token_ids;  // finish (reason "stop") after sampling one of these
  std::vector<std::string> stop;        // finish when the output text contains one (the first
                                        // to complete wins); the text ends before it
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;      // detokenized text omits special tokens
  // Logprob counts: -1 = none; k in [0, vocab] (validate_token_ids() checks the vocabulary
  // bound; the server's --max-logprobs, 20 by default as vLLM, caps what clients may ask).
  int64_t logprobs = -1;         // the sampled token's raw logprob and rank + the top k
                                 // (engine/sampler.h)
  int64_t prompt_logprobs = -1;  // each prompt token's logprob + the top k
  // Constrains the output to a JSON schema, regex, choice, grammar or structural tag
  // (engine/structured_output.h); validate() checks only its size bounds (kMaxStructured*).
  StructuredOutputParams structured_outputs;

  /// Throws SamplingParamError (a std::invalid_argument) naming the field for an out-of-range
  /// value (temperature < 0 or not finite, top_p outside (0, 1], top_k < -1 or > kMaxTopK, min_p
  /// outside [0, 1], presence / frequency penalties outside [-2, 2], repetition_penalty outside
  /// [0.01, 100], a logit_bias outside [-100, 100], max_tokens or min_tokens < 0, min_tokens >
  /// max_tokens, logprobs or prompt_logprobs < -1, an empty stop string, a negative
  /// logit_bias or stop_token_ids id, more stop strings, stop bytes, stop_token_ids or
  /// logit_bias entries than the kMax* bounds above; a structured_outputs spec or choice list
  /// beyond the kMaxStructured* bounds of engine/structured_output.h or a Choice without
  /// choices, naming structured_outputs.field; NaN is out of every range). Ids and logprob counts
  /// beyond the vocabulary: validate_token_ids() in engine/sampler.h.
  void validate() const;
};

}  // namespace octet
