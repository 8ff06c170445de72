#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace octet {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// A token that survives the filters and its unnormalised probability exp((l - max) / T).
struct Candidate {
  int32_t id;
  float w;
};

/// Most likely first; equal weights by id so every order below is deterministic.
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.w > b.w || (a.w == b.w && a.id < b.id);
}

// Per-thread scratch so the hot path allocates nothing once warm (a vocab of 49152 floats is
// above malloc's mmap threshold: a fresh vector per token would map and fault pages each time).
thread_local std::vector<float> t_logits;          // processed copy of one row: [vocab]
thread_local std::vector<float> t_select;          // top_k threshold selection: [vocab]
thread_local std::vector<Candidate> t_candidates;  // survivors, id ascending
thread_local std::vector<Candidate> t_nucleus;     // top_p partial selection
thread_local std::vector<uint8_t> t_seen;          // repetition penalty: all 0 between calls
thread_local std::vector<int32_t> t_counts;        // output token counts: all 0 between calls

void check_ids(const std::vector<int32_t>& ids, int64_t vocab, const char* what) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw std::out_of_range(std::string(what) + " token id " + std::to_string(id) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

bool has_processors(const SamplingParams& p, int64_t num_output) {
  return !p.logit_bias.empty() || num_output < p.min_tokens || p.repetition_penalty != 1.0f ||
         p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

/// The top_p nucleus of `c` (any order): the most likely candidates, by more_likely(), while
/// the mass before each is < top_p * total (vLLM keeps a token unless the mass of the tokens
/// less likely than it, itself included, is <= 1 - top_p: the same set). Sorts only growing
/// chunks of the head found by nth_element, so a peaked distribution costs O(n).
void keep_nucleus(std::vector<Candidate>& c, float top_p) {
  double total = 0.0;
  for (const Candidate& x : c) total += x.w;
  const double target = static_cast<double>(top_p) * total;
  std::vector<Candidate>& s = t_nucleus;
  s.assign(c.begin(), c.end());
  double mass = 0.0;
  size_t keep = 0, begin = 0, chunk = 64;
  while (keep == begin && begin < s.size()) {
    const size_t end = std::min(s.size(), begin + chunk);
    if (end < s.size())
      std::nth_element(s.begin() + begin, s.begin() + end, s.end(), more_likely);
    std::sort(s.begin() + begin, s.begin() + end, more_likely);
    for (size_t i = begin; i < end && mass < target; ++i) {
      mass += s[i].w;
      keep = i + 1;
    }
    begin = end;
    chunk *= 4;
  }
  s.resize(keep);
  std::sort(s.begin(), s.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  c.swap(s);
}

/// Survivors of temperature, min_p, top_k and top_p over processed logits `l`, id ascending,
/// with weights exp((l - max) / T). Tokens whose weight is 0 (masked, or underflowed) are gone.
void filter_candidates(const float* l, int64_t vocab, const SamplingParams& p,
                       std::vector<Candidate>& out) {
  const float mx = l[argmax(l, vocab)];
  if (mx == kNegInf) throw std::runtime_error("sampler: every token's logit is -inf");
  const float inv_t = 1.0f / p.temperature;
  // top_k as vLLM: keep logits >= the k-th largest (ties kept). Monotone in the logit, like
  // min_p's cut, so the intersection below equals vLLM's min_p-then-top_k.
  float threshold = kNegInf;
  if (p.top_k > 0 && p.top_k < vocab) {
    t_select.assign(l, l + vocab);
    std::nth_element(t_select.begin(), t_select.begin() + (p.top_k - 1), t_select.end(),
                     [](float a, float b) { return a > b; });
    threshold = t_select[static_cast<size_t>(p.top_k - 1)];
  }
  // min_p: p_i < min_p * p_max  <=>  w_i < min_p, since the largest weight is exp(0) = 1.
  const float min_w = p.min_p;
  out.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    if (l[i] < threshold) continue;
    const float w = std::exp((l[i] - mx) * inv_t);
    if (w > 0.0f && w >= min_w) out.push_back({static_cast<int32_t>(i), w});
  }
  if (p.top_p < 1.0f) keep_nucleus(out, p.top_p);
}

}  // namespace

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

void validate_token_ids(const SamplingParams& params, int64_t vocab) {
  const auto check = [&](int32_t id, const char* what) {
    if (id < 0 || id >= vocab)
      throw std::invalid_argument(std::string(what) + " token id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  };
  for (const auto& [id, bias] : params.logit_bias) check(id, "logit_bias");
  for (int32_t id : params.stop_token_ids) check(id, "stop_token_ids");
}

bool apply_logits_processors(float* l, int64_t vocab, const SamplingParams& p,
                             const std::vector<int32_t>& prompt_ids,
                             const std::vector<int32_t>& output_ids,
                             const std::vector<int32_t>& eos_token_ids) {
  const int64_t num_output = static_cast<int64_t>(output_ids.size());
  if (!has_processors(p, num_output)) return false;
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab)
      throw std::invalid_argument("logit_bias token id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  check_ids(prompt_ids, vocab, "prompt");
  check_ids(output_ids, vocab, "output");

  for (const auto& [id, bias] : p.logit_bias) l[id] += bias;
  if (num_output < p.min_tokens) {
    for (const std::vector<int32_t>* ids : {&eos_token_ids, &p.stop_token_ids})
      for (int32_t id : *ids)
        if (id >= 0 && id < vocab) l[id] = kNegInf;
  }
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    if (static_cast<int64_t>(t_seen.size()) < vocab) t_seen.resize(vocab, 0);
    for (const std::vector<int32_t>* ids : {&prompt_ids, &output_ids})
      for (int32_t id : *ids) {
        if (t_seen[id]) continue;
        t_seen[id] = 1;
        l[id] = l[id] > 0.0f ? l[id] / r : l[id] * r;
      }
    for (const std::vector<int32_t>* ids : {&prompt_ids, &output_ids})
      for (int32_t id : *ids) t_seen[id] = 0;
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    if (static_cast<int64_t>(t_counts.size()) < vocab) t_counts.resize(vocab, 0);
    for (int32_t id : output_ids) ++t_counts[id];
    for (int32_t id : output_ids) {
      const int32_t n = t_counts[id];
      if (n == 0) continue;  // already done
      // Two FP32 subtractions in vLLM's order (frequency, then presence).
      l[id] -= p.frequency_penalty * static_cast<float>(n);
      l[id] -= p.presence_penalty;
      t_counts[id] = 0;
    }
  }
  return true;
}

std::vector<double> sampling_probs(const float* processed_logits, int64_t vocab,
                                   const SamplingParams& params) {
  if (params.temperature < kGreedyTemperature)
    throw std::invalid_argument("sampling_probs: greedy temperature has no distribution");
  filter_candidates(processed_logits, vocab, params, t_candidates);
  double total = 0.0;
  for (const Candidate& c : t_candidates) total += c.w;
  std::vector<double> probs(static_cast<size_t>(vocab), 0.0);
  for (const Candidate& c : t_candidates) probs[c.id] = c.w / total;
  return probs;
}

SampleResult sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    const std::vector<int32_t>& prompt_ids,
                    const std::vector<int32_t>& output_ids,
                    const std::vector<int32_t>& eos_token_ids, std::mt19937_64& rng) {
  const float* l = logits;
  if (has_processors(params, static_cast<int64_t>(output_ids.size()))) {
    t_logits.assign(logits, logits + vocab);
    apply_logits_processors(t_logits.data(), vocab, params, prompt_ids, output_ids,
                            eos_token_ids);
    l = t_logits.data();
  }
  int32_t token;
  if (params.temperature < kGreedyTemperature) {
    token = argmax(l, vocab);
    if (l[token] == kNegInf) throw std::runtime_error("sampler: every token's logit is -inf");
  } else {
    std::vector<Candidate>& c = t_candidates;
    filter_candidates(l, vocab, params, c);
    // Inverse CDF in id order: the total and the walk add the same terms in the same order,
    // so the walk always ends inside; the last candidate guards against u * total rounding up.
    double total = 0.0;
    for (const Candidate& x : c) total += x.w;
    const double target = uniform_from(rng) * total;
    token = c.back().id;
    double acc = 0.0;
    for (const Candidate& x : c) {
      acc += x.w;
      if (target < acc) {
        token = x.id;
        break;
      }
    }
  }
  if (params.logprobs < 0) {
    SampleResult r;
    r.token_id = token;
    return r;
  }
  return logprobs_for(logits, vocab, token, params.logprobs);
}

SampleResult logprobs_for(const float* logits, int64_t vocab, int32_t token, int64_t k) {
  if (token < 0 || token >= vocab)
    throw std::out_of_range("logprobs_for: token id " + std::to_string(token) +
                            " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  // log_softmax in FP32 with an FP64 sum: logprob_i = (l_i - max) - log(sum exp(l - max))
  // (subtracting the max first keeps the precision of large logits).
  const float mx = logits[argmax(logits, vocab)];
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] - mx);
  const float log_sum = static_cast<float>(std::log(sum));
  const auto logprob = [&](int64_t i) { return (logits[i] - mx) - log_sum; };

  SampleResult r;
  r.token_id = token;
  const float lt = logits[token];
  r.logprob = logprob(token);
  int64_t ahead = 0;  // tokens ranked before `token`: larger logit, or equal with a lower id
  for (int64_t i = 0; i < vocab; ++i) ahead += logits[i] > lt || (logits[i] == lt && i < token);
  r.rank = ahead + 1;

  // Top k by one pass keeping a sorted buffer: ids arrive ascending, so a tie never displaces.
  const size_t kk = static_cast<size_t>(std::clamp<int64_t>(k, 0, vocab));
  std::vector<int32_t> top;
  top.reserve(kk + 1);
  for (int64_t i = 0; i < vocab && kk > 0; ++i) {
    if (top.size() == kk && !(logits[i] > logits[top.back()])) continue;
    auto at = std::upper_bound(top.begin(), top.end(), logits[i],
                               [&](float v, int32_t id) { return v > logits[id]; });
    top.insert(at, static_cast<int32_t>(i));
    if (top.size() > kk) top.pop_back();
  }
  r.top_logprobs.reserve(top.size());
  for (size_t i = 0; i < top.size(); ++i)
    r.top_logprobs.push_back({top[i], logprob(top[i]), static_cast<int64_t>(i) + 1});
  return r;
}

}  // namespace octet
