#pragma once
// Token sampling from one row of logits, with vLLM v1's per-request logits processing
// (vllm/v1/sample/sampler.py, ops/penalties.py, ops/topk_topp_sampler.py, logits processors
// min_tokens / logit_bias / min_p). Order, as vLLM:
//   1. raw logprobs: log_softmax of the unprocessed logits (vLLM's default logprobs_mode
//      "raw_logprobs"), FP32;
//   2. logit_bias (added), min_tokens (EOS ids and stop_token_ids -> -inf while fewer than
//      min_tokens tokens were generated, whether or not ignore_eos, as vLLM);
//   3. repetition penalty over prompt + output tokens (l > 0 ? l / r : l * r, once per distinct
//      token), then frequency and presence penalties over output tokens
//      (l -= frequency * count + presence * (count > 0));
//   4. temperature < kGreedyTemperature: argmax of the processed logits (lowest id on ties);
//      otherwise p = softmax(l / T), then min_p (drop p < min_p * p_max), top_k (keep tokens
//      whose logit is >= the k-th largest: ties at the boundary are kept, as vLLM's threshold),
//      top_p over the renormalised survivors (Holtzman et al. 2019: keep the most likely tokens,
//      by p descending then id ascending, until their mass reaches top_p), renormalise, and
//      draw by inverse CDF over the survivors in ascending id order with exactly one 53-bit
//      uniform from `rng`.
// exp is a vectorised polynomial within a few ulp of std::exp (FP32), sums are FP64.
// Backend::sample_rows draws the same token on the device (kernels/common/sampling.h; the
// engine's plan: OutputProcessor::device_sampling).
// min_p before top_k / top_p is vLLM v1's order (min_p is an "argmax-invariant" processor applied
// right after temperature); it matters only for top_p, whose mass is then measured over the
// min_p survivors.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "kernels/common/sampling.h"

namespace octet {

/// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;

/// One token and its raw log probability. rank: 1 = most likely; tokens are ordered by logit
/// descending, then id ascending, so tied tokens get distinct ranks (vLLM instead gives every
/// tied token the count of tokens >= it).
struct TokenLogprob {
  int32_t token_id = -1;
  float logprob = 0.0f;
  int64_t rank = 0;
};

/// The sampled (or given) token with its raw logprob and rank, and the top k tokens by raw
/// logprob (logprob descending, id ascending). logprob and rank are 0 and top_logprobs empty
/// when no logprobs were requested (SamplingParams::logprobs == -1). When sampling failed for
/// this request, `error` says why and token_id is -1 (the caller fails the one request).
struct SampleResult {
  int32_t token_id = -1;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<TokenLogprob> top_logprobs;
  std::string error;  // "" = a token was produced
  bool ok() const { return error.empty(); }
};

/// Whether a request's next token is plain greedy: temperature < kGreedyTemperature, no
/// logprobs, no structured output, no logits processor active with num_output tokens generated
/// (logit_bias, min_tokens, penalties). Then sample() is argmax() of the raw row (or an error
/// for a non-finite logit): the runner may take it from Backend::argmax_rows instead.
bool plain_greedy(const SamplingParams& params, int64_t num_output);

/// Whether the backend can sample a request's next token (Backend::sample_rows, the same token
/// as sample()): no logprobs and no structured output (logits processors are LogitEdits).
bool device_sampleable(const SamplingParams& params);

/// A step's sampling on the backend (OutputProcessor::device_sampling -> ModelRunner::execute):
/// per scheduled request its row's params (mode kSkip: the host samples it), and the edits
/// their edit_begin / edit_count index.
struct DeviceSampling {
  std::vector<SampleRowParams> rows;
  std::vector<LogitEdit> edits;
};

/// What Backend::sample_rows needs to draw the token sample() would draw from a row with
/// params and uniform u: kGreedy for a greedy temperature, else kSample with 1 / temperature
/// (FP32), min_p, top_p and top_k (0 when off); no edits. Only for device_sampleable() params.
SampleRowParams device_sample_params(const SamplingParams& params, double u);

/// Appends to `edits` the LogitEdits that make a row's logits what apply_logits_processors()
/// makes them (logit_bias, min_tokens masking eos_token_ids and stop_token_ids, repetition over
/// prompt + output, frequency and presence over output), one per token touched, in token order
/// of first touch; returns their count. Returns -1 (edits unchanged) for an id outside
/// [0, vocab) (the host sampler reports it), a token listed twice in logit_bias, or more than
/// max_edits edits.
int64_t append_logit_edits(const SamplingParams& params, int64_t vocab,
                           const std::vector<int32_t>& prompt_ids,
                           const std::vector<int32_t>& output_ids,
                           const std::vector<int32_t>& eos_token_ids, int64_t max_edits,
                           std::vector<LogitEdit>& edits);

/// Index of the largest logit; the lowest index wins ties (as torch.argmax). logits: [vocab].
int32_t argmax(const float* logits, int64_t vocab);

/// Throws RequestError (InvalidRequest, param "logit_bias" / "stop_token_ids") for an id
/// outside [0, vocab), and (param "logprobs" / "prompt_logprobs") for a logprob count > vocab
/// (validate() checks what needs no vocabulary; call both before admitting a request).
void validate_token_ids(const SamplingParams& params, int64_t vocab);

/// Steps 2-3 above, in place. logits: [vocab] FP32. prompt_ids / output_ids: the request's
/// prompt and generated token ids so far; eos_token_ids: the model's EOS ids. Throws
/// std::invalid_argument for a logit_bias id outside [0, vocab) and std::out_of_range for a
/// prompt or output id outside it. EOS / stop ids outside the vocabulary are not masked (they
/// can never be sampled). Returns false when it changed nothing (no processor active).
bool apply_logits_processors(float* logits, int64_t vocab, const SamplingParams& params,
                             const std::vector<int32_t>& prompt_ids,
                             const std::vector<int32_t>& output_ids,
                             const std::vector<int32_t>& eos_token_ids);

/// The distribution a non-greedy request draws from: [vocab] probabilities (0 for filtered
/// tokens) after temperature, min_p, top_k, top_p and renormalisation of `processed_logits`
/// (step 4 above, without the draw). For tests and diagnostics; sample() does not build it.
/// Throws std::invalid_argument when temperature < kGreedyTemperature or a logit is NaN or
/// +inf, std::runtime_error when every logit is -inf.
std::vector<double> sampling_probs(const float* processed_logits, int64_t vocab,
                                   const SamplingParams& params);

/// Samples one token from logits: [vocab] (FP32) by steps 1-4 above. Greedy requests
/// use no random number; every other call takes exactly one rng() output, so a seeded request's
/// stream depends neither on other requests nor on its filter settings. The logprob fields are
/// filled when params.logprobs >= 0 (top_logprobs holds min(params.logprobs, vocab) entries,
/// any k up to the whole vocabulary).
/// Cost, all O(vocab) passes (SSE2-vectorised exp): greedy one max pass; sampling adds one exp
/// pass and the draw; top_k a size-k heap pass; top_p a pass bucketing the weights by binary
/// exponent and a partial selection inside the one bucket where the mass crosses top_p (never a
/// full sort unless that bucket is most of the vocabulary); logprobs one more exp pass (top k
/// <= 32 kept sorted inside it; larger k: an O(vocab) nth_element and an O(k log k) sort; the
/// result holds k entries). Measured
/// on vocab 49152 (test_sampler "[bench]", CPU time, shared 2-core build machine): greedy ~7 us,
/// T=1 ~90 us, top_k=50 ~120 us, top_p=0.9 ~170 us, with logprobs=5 ~180 us.
/// Total: never throws for any logits or ids (short of std::bad_alloc); instead returns a
/// result with `error` set (token_id -1) when a raw logit is not finite (the model produced NaN
/// or inf), an id is outside the vocabulary (logit_bias, prompt or output), logits processing
/// made a logit NaN or +inf, every processed logit is -inf (e.g. min_tokens masking every
/// token) or no token survived the filters. Costs one more bit-test pass over the raw row (and
/// one over the processed row when a processor is active) for these checks.
/// Thread-safe (scratch buffers are thread_local).
/// token_bitmask (structured outputs, engine/grammar_compiler.h): when given, the tokens it
/// disallows are set to -inf in a copy of the raw row before step 1, so the raw logprobs, the
/// processors and the draw all see the masked distribution (vLLM v1 applies the grammar
/// bitmask to the logits before its sampler); masked tokens never appear in top_logprobs
/// (fewer than k entries when fewer tokens are allowed). An all-masked row is an `error`.
SampleResult sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    const std::vector<int32_t>& prompt_ids,
                    const std::vector<int32_t>& output_ids,
                    const std::vector<int32_t>& eos_token_ids, std::mt19937_64& rng,
                    const int32_t* token_bitmask = nullptr);

/// sample() with the uniform of the draw given (drawn earlier from the request's RNG by
/// uniform_from, e.g. before the step, for a row the backend was to sample) instead of taken
/// from an RNG. u in [0, 1); unused for greedy requests.
SampleResult sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    const std::vector<int32_t>& prompt_ids,
                    const std::vector<int32_t>& output_ids,
                    const std::vector<int32_t>& eos_token_ids, double u,
                    const int32_t* token_bitmask = nullptr);

/// Sets logits[i] = -inf for every token i in [0, vocab) whose bit is clear in bitmask:
/// [ceil(vocab / 32)] int32 words, bit (i % 32) of word i / 32 (xgrammar's layout). Words that
/// are all ones (the common case inside a JSON string) cost one compare.
void apply_token_bitmask(float* logits, int64_t vocab, const int32_t* bitmask);

/// Raw logprob and rank of `token` and the top k (k >= 0; k >= vocab lists the whole vocabulary)
/// tokens of logits: [vocab] (for prompt logprobs: the logits at position i scored against
/// prompt token i + 1). token_id = token.
/// Total as sample(): `error` is set for a token outside [0, vocab) or a non-finite logit.
SampleResult logprobs_for(const float* logits, int64_t vocab, int32_t token, int64_t k);

/// The uniform in [0, 1) that sample() makes from one rng() output: its top 53 bits / 2^53.
inline double uniform_from(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace octet
