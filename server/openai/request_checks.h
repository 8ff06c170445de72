#pragma once
// The checks of a parsed request (openai_request.h) that need the loaded model or the server's
// options, run when its GenerationJob starts: vLLM's logprob bounds (its processor's
// _validate_logprobs), the logit_bias ids against the vocabulary, and the bound on the logprob
// entries one response carries.
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

/// Most logprob entries (a token's logprob, or one of its top alternatives) one response may
/// carry: ~16 bytes of JSON each, so ~16 MB. A 2000-token prompt echoed with logprobs 20 is
/// 2000 x 21 = 42,000 per choice; the same with n = 128 (5.4M) is refused.
inline constexpr int64_t kMaxLogprobEntries = 1000000;

/// The logprob entries a response to `r` carries, over its prompts (prompt_lens[p] tokens,
/// max_tokens[p] the resolved completion budget) and n choices each: prompt tokens x
/// (logprobs + 1) when echo with logprobs, prompt tokens x (prompt_logprobs + 1) for
/// prompt_logprobs, and max_tokens x (logprobs + 1) for the sampled tokens. Saturates at
/// INT64_MAX instead of overflowing.
int64_t logprob_entries(const GenerateRequest& r, const std::vector<int64_t>& prompt_lens,
                        const std::vector<int64_t>& max_tokens);

/// The logprob entry budget of one response under --max-logprobs k (k already resolved to at
/// most the vocabulary): kMaxLogprobEntries, or 64 rows of k + 1 entries when more, so that
/// an operator who allows whole-vocabulary logprobs (vLLM's test_chat_echo.py: prompt_logprobs
/// -1 on a 30-token prompt) gets them for short prompts while the response stays bounded.
int64_t logprob_entry_limit(int64_t max_logprobs);

/// Throws ApiError 400 naming the logprobs field ("logprobs", "top_logprobs" or
/// "prompt_logprobs") when logprob_entries() exceeds `limit`; the message gives the count, the
/// limit and what to lower.
void check_logprob_budget(const GenerateRequest& r, const std::vector<int64_t>& prompt_lens,
                          const std::vector<int64_t>& max_tokens,
                          int64_t limit = kMaxLogprobEntries);

}  // namespace octet::server
