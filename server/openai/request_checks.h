#pragma once
// The checks of a parsed request (openai_request.h) that need the loaded model or the server's
// options, run when its GenerationJob starts: vLLM's logprob bounds (its processor's
// _validate_logprobs) and the logit_bias ids against the vocabulary.
#include <cstdint>

#include "engine/sampling_params.h"
#include "server/openai/openai_request.h"

namespace octet::server {

/// Resolves the logprob counts of `r` against the model and the server (vLLM's
/// _validate_logprobs): kLogprobsWholeVocab becomes vocab_size; a count above max_logprobs
/// (--max-logprobs; -1 = vocab_size, vLLM's "no cap") gets ApiError 400 naming the field
/// ("Requested sample logprobs of N, which is greater than max allowed: M", or "prompt
/// logprobs"). Sets r.params to the resolved counts. A count within --max-logprobs but above
/// vocab_size is the engine's 400 (validate_token_ids, engine/sampler.h).
void resolve_logprobs(GenerateRequest& r, int64_t vocab_size, int64_t max_logprobs);

/// ApiError 400 (param "logit_bias") naming every logit_bias token id outside [0, vocab_size),
/// as vLLM lists them all (the engine's own check names the first only).
void check_logit_bias_vocab(const SamplingParams& params, int64_t vocab_size);

}  // namespace octet::server
