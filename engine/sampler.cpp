#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/request_error.h"
#include "kernels/common/sampling.h"

namespace octet {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread scratch so the hot path allocates nothing once warm (a vocab of 49152 floats is
// above malloc's mmap threshold: a fresh vector per token would map and fault pages each time).
thread_local std::vector<float> t_logits;   // processed copy of one row: [vocab]
thread_local std::vector<float> t_weights;  // unnormalised survivor probabilities: [vocab]
thread_local std::vector<float> t_select;   // top_k selection
thread_local std::vector<uint8_t> t_seen;   // repetition penalty: all 0 between calls
thread_local std::vector<int32_t> t_counts; // output token counts: all 0 between calls

/// Largest value of x: [n], n >= 1 (8 independent lanes, so the compiler can vectorise).
float max_value(const float* x, int64_t n) {
  float lane[8];
  for (int j = 0; j < 8; ++j) lane[j] = x[0];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  for (; i < n; ++i) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
  float m = lane[0];
  for (int j = 1; j < 8; ++j) m = lane[j] > m ? lane[j] : m;
  return m;
}

// Four floats as one value (GCC/Clang vector extension; SSE2 on x86-64, NEON on ARM). Explicit
// lanes and masks: the scalar selects below would not vectorise under -ftrapping-math.
using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = int32_t __attribute__((vector_size(16)));

inline f32x4 select(i32x4 mask, f32x4 a, f32x4 b) {
  return reinterpret_cast<f32x4>((reinterpret_cast<i32x4>(a) & mask) |
                                 (reinterpret_cast<i32x4>(b) & ~mask));
}

/// exp(x) for x <= 0 (or -inf), FP32: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, and
/// Cephes' expf polynomial (within a few ulp of std::exp), times 2^n. Exactly 0 below -87
/// (where exp nears the end of the normal range) and for -inf.
inline f32x4 exp_nonpositive(f32x4 x) {
  using namespace sampling_math;
  const i32x4 under = x < -87.0f;
  const f32x4 xc = select(under, f32x4{} - 87.0f, x);
  const i32x4 ni = __builtin_convertvector(xc * kLog2e - 0.5f, i32x4);  // ceil
  const f32x4 n = __builtin_convertvector(ni, f32x4);
  const f32x4 r = (xc - n * kLn2Hi) + n * kLn2Lo;
  f32x4 p = r * kExpP0 + kExpP1;
  p = p * r + kExpP2;
  p = p * r + kExpP3;
  p = p * r + kExpP4;
  p = p * r + kExpP5;
  p = p * r * r + r + 1.0f;
  const f32x4 scale = reinterpret_cast<f32x4>((ni + 127) << 23);
  return select(under, f32x4{}, p * scale);
}

/// Calls f(i, x) for each group of 4 values x = src[i, i + 4) of src: [n], the last group padded
/// with -inf.
template <class F>
void for_each4(const float* src, int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    f32x4 x;
    std::memcpy(&x, src + i, sizeof x);
    f(i, x);
  }
  if (i < n) {
    float pad[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
    std::memcpy(pad, src + i, static_cast<size_t>(n - i) * sizeof(float));
    f32x4 x;
    std::memcpy(&x, pad, sizeof x);
    f(i, x);
  }
}

/// The k-th largest of x: [n] (1 <= k < n): a size-k min-heap for small k, else nth_element.
float kth_largest(const float* x, int64_t n, int64_t k) {
  std::vector<float>& s = t_select;
  if (k <= 4096 && k * 8 <= n) {
    s.assign(x, x + k);
    std::make_heap(s.begin(), s.end(), std::greater<float>());
    for (int64_t i = k; i < n; ++i) {
      if (!(x[i] > s.front())) continue;
      std::pop_heap(s.begin(), s.end(), std::greater<float>());
      s.back() = x[i];
      std::push_heap(s.begin(), s.end(), std::greater<float>());
    }
    return s.front();
  }
  s.assign(x, x + n);
  std::nth_element(s.begin(), s.begin() + (k - 1), s.end(), std::greater<float>());
  return s[static_cast<size_t>(k - 1)];
}

/// A token in the top_p boundary search, ordered most likely first, equal weights by id.
struct Candidate {
  int32_t id;
  float w;
};
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.w > b.w || (a.w == b.w && a.id < b.id);
}
thread_local std::vector<Candidate> t_nucleus;  // the top_p boundary bucket

/// Zeroes w: [n] outside the top_p nucleus: the most likely tokens, by more_likely(), while the
/// mass before each is < top_p * total (vLLM keeps a token unless the mass of the tokens less
/// likely than it, itself included, is <= 1 - top_p: the same set). Weights are bucketed by
/// their binary exponent, so only the bucket where the mass crosses top_p is ordered, by growing
/// chunks found with nth_element: no full sort unless that bucket is most of the vocabulary.
void keep_nucleus(float* w, int64_t n, float top_p) {
  double mass[256] = {};
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w[i], sizeof bits);
    mass[bits >> 23] += w[i];  // w in [0, 1]: the sign bit is 0
  }
  const sampling_math::NucleusCrossing start = sampling_math::nucleus_crossing(mass, top_p);
  const double target = start.target;
  double before = start.before;
  const int crossing = start.crossing;
  std::vector<Candidate>& c = t_nucleus;
  c.clear();
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w[i], sizeof bits);
    if (static_cast<int>(bits >> 23) == crossing && w[i] > 0.0f)
      c.push_back({static_cast<int32_t>(i), w[i]});
  }
  if (c.empty()) return;  // the nucleus is everything (target not reached through rounding)
  Candidate last = c.front();
  size_t begin = 0, chunk = 64;
  bool done = false;
  while (!done && begin < c.size()) {
    const size_t end = std::min(c.size(), begin + chunk);
    if (end < c.size()) std::nth_element(c.begin() + begin, c.begin() + end, c.end(), more_likely);
    std::sort(c.begin() + begin, c.begin() + end, more_likely);
    for (size_t i = begin; i < end; ++i) {
      if (before >= target) {
        done = true;
        break;
      }
      before += c[i].w;
      last = c[i];
    }
    begin = end;
    chunk *= 4;
  }
  for (int64_t i = 0; i < n; ++i)
    if (!(w[i] > last.w || (w[i] == last.w && i <= last.id))) w[i] = 0.0f;
}

/// w: [vocab] = the unnormalised probabilities exp((l - max) / T) of the tokens that survive
/// min_p, top_k and top_p over processed logits `l`; 0 for every other token.
/// Returns false (w untouched) when every logit is -inf. l holds no NaN or +inf.
bool survivor_weights(const float* l, int64_t vocab, const SamplingParams& p,
                      std::vector<float>& w) {
  const float mx = max_value(l, vocab);
  if (mx == kNegInf) return false;
  const float inv_t = 1.0f / p.temperature;
  // top_k as vLLM: keep logits >= the k-th largest (ties kept). Monotone in the logit, like
  // min_p's cut, so applying both at once equals vLLM's min_p-then-top_k.
  const float threshold = p.top_k > 0 && p.top_k < vocab ? kth_largest(l, vocab, p.top_k) : kNegInf;
  // min_p: p_i < min_p * p_max  <=>  w_i < min_p, since the largest weight is exp(0) = 1.
  const float min_w = p.min_p;
  w.resize(static_cast<size_t>(vocab) + 4);  // room for the padded last group
  float* out = w.data();
  for_each4(l, vocab, [&](int64_t i, f32x4 x) {
    const f32x4 e = exp_nonpositive((x - mx) * inv_t);
    const f32x4 o = select((x >= threshold) & (e >= min_w), e, f32x4{});
    std::memcpy(out + i, &o, sizeof o);
  });
  if (p.top_p < 1.0f) keep_nucleus(out, vocab, p.top_p);
  return true;
}

/// Index of the first value of x: [n] that is NaN or +inf (and -inf unless kAllowNegInf), or -1.
/// Bit tests, so the scan vectorises (an OR reduction over integer lanes).
template <bool kAllowNegInf>
int64_t first_bad_logit(const float* x, int64_t n) {
  const auto bad = [](const float* v) -> uint32_t {
    uint32_t b;
    std::memcpy(&b, v, sizeof b);
    const uint32_t mag = b & 0x7fffffffu;  // exponent all ones: inf (mantissa 0) or NaN
    if (kAllowNegInf) return static_cast<uint32_t>(mag > 0x7f800000u) | (b == 0x7f800000u);
    return static_cast<uint32_t>(mag >= 0x7f800000u);
  };
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= bad(x + i);
  if (!any) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (bad(x + i)) return i;
  return -1;
}

/// logprobs_for() once token is known to be in [0, vocab) and no logit NaN or +inf; -inf
/// logits (masked by a grammar) are allowed and never listed in top_logprobs.
SampleResult logprobs_of(const float* logits, int64_t vocab, int32_t token, int64_t k);

std::string describe_logit(const float* x, int64_t i) {
  return std::to_string(x[i]) + " for token id " + std::to_string(i);
}

/// The error for an id outside [0, vocab) in the processors' inputs, or "".
std::string check_processor_ids(const SamplingParams& p, int64_t vocab,
                                const std::vector<int32_t>& prompt_ids,
                                const std::vector<int32_t>& output_ids) {
  const auto outside = [&](int32_t id, const char* what) {
    return std::string(what) + " token id " + std::to_string(id) +
           " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
  };
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || id >= vocab) return outside(id, "logit_bias");
  for (const std::vector<int32_t>* ids : {&prompt_ids, &output_ids})
    for (int32_t id : *ids)
      if (id < 0 || id >= vocab) return outside(id, ids == &prompt_ids ? "prompt" : "output");
  return "";
}

bool has_processors(const SamplingParams& p, int64_t num_output) {
  return !p.logit_bias.empty() || num_output < p.min_tokens || p.repetition_penalty != 1.0f ||
         p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

/// The draw's blocks (kernels/common/sampling.h), also the logprobs sum's FP32 partial sums.
constexpr int64_t kBlock = kSampleBlock;
using sampling_math::inverse_cdf;

}  // namespace

bool device_sampleable(const SamplingParams& params) {
  return params.logprobs < 0 && !params.structured_outputs.active();
}

bool plain_greedy(const SamplingParams& params, int64_t num_output) {
  return params.temperature < kGreedyTemperature && device_sampleable(params) &&
         !has_processors(params, num_output);
}

int64_t append_logit_edits(const SamplingParams& p, int64_t vocab,
                           const std::vector<int32_t>& prompt_ids,
                           const std::vector<int32_t>& output_ids,
                           const std::vector<int32_t>& eos_token_ids, int64_t max_edits,
                           std::vector<LogitEdit>& edits) {
  const int64_t num_output = static_cast<int64_t>(output_ids.size());
  if (!has_processors(p, num_output)) return 0;
  if (!check_processor_ids(p, vocab, prompt_ids, output_ids).empty()) return -1;
  // t_counts doubles as the token -> edit index map (index + 1; 0 between calls).
  std::vector<int32_t>& at = t_counts;
  if (static_cast<int64_t>(at.size()) < vocab) at.resize(static_cast<size_t>(vocab), 0);
  const size_t first = edits.size();
  const auto edit = [&](int32_t id) -> LogitEdit& {
    if (at[id] == 0) {
      edits.push_back(LogitEdit{});
      edits.back().token = id;
      at[id] = static_cast<int32_t>(edits.size() - first);
    }
    return edits[first + static_cast<size_t>(at[id] - 1)];
  };
  bool repeated_bias = false;  // the host adds each entry in turn: no one edit rounds so
  for (const auto& [id, bias] : p.logit_bias) {
    LogitEdit& e = edit(id);
    repeated_bias = repeated_bias || (e.flags & LogitEdit::kBias) != 0;
    e.flags |= LogitEdit::kBias;
    e.bias = bias;
  }
  if (num_output < p.min_tokens)
    for (const std::vector<int32_t>* ids : {&eos_token_ids, &p.stop_token_ids})
      for (int32_t id : *ids)
        if (id >= 0 && id < vocab) edit(id).flags |= LogitEdit::kMask;
  if (p.repetition_penalty != 1.0f)
    for (const std::vector<int32_t>* ids : {&prompt_ids, &output_ids})
      for (int32_t id : *ids) {
        LogitEdit& e = edit(id);
        e.flags |= LogitEdit::kRepeat;
        e.repetition = p.repetition_penalty;
      }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (int32_t id : output_ids) edit(id).pad += 1;  // the count, folded below
    for (int32_t id : output_ids) {
      LogitEdit& e = edit(id);
      if (e.flags & LogitEdit::kCount) continue;
      e.flags |= LogitEdit::kCount;
      e.frequency = p.frequency_penalty * static_cast<float>(e.pad);  // as apply_processors
      e.presence = p.presence_penalty;
      e.pad = 0;
    }
  }
  for (size_t k = first; k < edits.size(); ++k) at[edits[k].token] = 0;
  const int64_t count = static_cast<int64_t>(edits.size() - first);
  if (count > max_edits || repeated_bias) {
    edits.resize(first);
    return -1;
  }
  return count;
}

SampleRowParams device_sample_params(const SamplingParams& params, double u) {
  SampleRowParams p;
  if (params.temperature < kGreedyTemperature) {
    p.mode = SampleRowParams::kGreedy;
    return p;
  }
  p.mode = SampleRowParams::kSample;
  p.u = u;
  p.inv_temperature = 1.0f / params.temperature;  // survivor_weights' inv_t
  p.min_p = params.min_p;
  p.top_p = params.top_p;
  p.top_k = params.top_k > 0 && params.top_k < std::numeric_limits<int32_t>::max()
                ? static_cast<int32_t>(params.top_k)
                : 0;
  return p;
}

int32_t argmax(const float* logits, int64_t vocab) {
  // The maximum first (vectorisable), then its first index.
  const float mx = max_value(logits, vocab);
  for (int64_t i = 0; i < vocab; ++i)
    if (logits[i] == mx) return static_cast<int32_t>(i);
  return 0;  // only when every logit is NaN
}

void validate_token_ids(const SamplingParams& params, int64_t vocab) {
  std::vector<int32_t> bias_ids;
  for (const auto& [id, bias] : params.logit_bias) bias_ids.push_back(id);
  check_token_ids(bias_ids, vocab, "logit_bias");
  check_token_ids(params.stop_token_ids, vocab, "stop_token_ids");
  for (const auto& [k, field] : {std::pair{params.logprobs, "logprobs"},
                                 std::pair{params.prompt_logprobs, "prompt_logprobs"}})
    if (k > vocab)
      throw RequestError(RequestErrorKind::InvalidRequest,
                         std::string("'") + field + "' asks for the top " + std::to_string(k) +
                             " tokens, more than the vocabulary's " + std::to_string(vocab),
                         field);
}

namespace {

/// apply_logits_processors() once every id is known to be inside the vocabulary.
void apply_processors(float* l, int64_t vocab, const SamplingParams& p,
                      const std::vector<int32_t>& prompt_ids,
                      const std::vector<int32_t>& output_ids,
                      const std::vector<int32_t>& eos_token_ids) {
  const int64_t num_output = static_cast<int64_t>(output_ids.size());
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
}

}  // namespace

bool apply_logits_processors(float* l, int64_t vocab, const SamplingParams& p,
                             const std::vector<int32_t>& prompt_ids,
                             const std::vector<int32_t>& output_ids,
                             const std::vector<int32_t>& eos_token_ids) {
  if (!has_processors(p, static_cast<int64_t>(output_ids.size()))) return false;
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || id >= vocab)
      throw std::invalid_argument("logit_bias token id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (const std::string e = check_processor_ids(p, vocab, prompt_ids, output_ids); !e.empty())
    throw std::out_of_range(e);
  apply_processors(l, vocab, p, prompt_ids, output_ids, eos_token_ids);
  return true;
}

std::vector<double> sampling_probs(const float* processed_logits, int64_t vocab,
                                   const SamplingParams& params) {
  if (params.temperature < kGreedyTemperature)
    throw std::invalid_argument("sampling_probs: greedy temperature has no distribution");
  if (first_bad_logit<true>(processed_logits, vocab) >= 0)
    throw std::invalid_argument("sampling_probs: a logit is NaN or +inf");
  if (!survivor_weights(processed_logits, vocab, params, t_weights))
    throw std::runtime_error("sampler: every token's logit is -inf");
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += t_weights[i];
  std::vector<double> probs(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) probs[i] = t_weights[i] / total;
  return probs;
}

void apply_token_bitmask(float* logits, int64_t vocab, const int32_t* bitmask) {
  const int64_t words = (vocab + 31) / 32;
  for (int64_t w = 0; w < words; ++w) {
    const uint32_t bits = static_cast<uint32_t>(bitmask[w]);
    if (bits == 0xffffffffu) continue;
    float* x = logits + w * 32;
    if (bits == 0 && w * 32 + 32 <= vocab) {
      for (int b = 0; b < 32; ++b) x[b] = kNegInf;
      continue;
    }
    const int64_t end = std::min<int64_t>(32, vocab - w * 32);
    if (end == 32) {
      // Four lanes at a time: lane j of group b keeps x[b + j] when bit b + j is set (explicit
      // vector masks: a scalar select would not vectorise under -ftrapping-math).
      using u32x4 = uint32_t __attribute__((vector_size(16)));
      const u32x4 lane_bit = {1u, 2u, 4u, 8u};
      const f32x4 neg_inf = f32x4{} + kNegInf;
      for (int b = 0; b < 32; b += 4) {
        const u32x4 word = u32x4{} + (bits >> b);
        const i32x4 keep = reinterpret_cast<i32x4>((word & lane_bit) != 0);
        f32x4 v;
        std::memcpy(&v, x + b, sizeof v);
        v = select(keep, v, neg_inf);
        std::memcpy(x + b, &v, sizeof v);
      }
    } else {
      for (int64_t b = 0; b < end; ++b)
        if (!((bits >> b) & 1u)) x[b] = kNegInf;
    }
  }
}

namespace {

/// sample() with the draw's uniform from *rng when given, else u.
SampleResult sample_with(const float* raw_logits, int64_t vocab, const SamplingParams& params,
                         const std::vector<int32_t>& prompt_ids,
                         const std::vector<int32_t>& output_ids,
                         const std::vector<int32_t>& eos_token_ids, std::mt19937_64* rng,
                         double u, const int32_t* token_bitmask) {
  SampleResult r;
  if (const int64_t bad = first_bad_logit<false>(raw_logits, vocab); bad >= 0) {
    r.error = "the model produced a non-finite logit (" + describe_logit(raw_logits, bad) + ")";
    return r;
  }
  // From here `logits` is the raw row as the sampler sees it: masked by the grammar if any.
  const float* logits = raw_logits;
  if (token_bitmask) {
    thread_local std::vector<float> t_masked;
    t_masked.assign(raw_logits, raw_logits + vocab);
    apply_token_bitmask(t_masked.data(), vocab, token_bitmask);
    logits = t_masked.data();
  }
  const float* l = logits;
  if (has_processors(params, static_cast<int64_t>(output_ids.size()))) {
    r.error = check_processor_ids(params, vocab, prompt_ids, output_ids);
    if (!r.error.empty()) return r;
    t_logits.assign(logits, logits + vocab);
    apply_processors(t_logits.data(), vocab, params, prompt_ids, output_ids, eos_token_ids);
    l = t_logits.data();
    if (const int64_t bad = first_bad_logit<true>(l, vocab); bad >= 0) {
      r.error = "logits processing (logit_bias, penalties) made a logit non-finite (" +
                describe_logit(l, bad) + ")";
      return r;
    }
  }
  const char* const kAllMasked =
      token_bitmask
          ? "the structured output grammar allows no token here (with min_tokens masking EOS "
            "and stop_token_ids, or logit_bias): no token can be sampled"
          : "every token's logit is -inf after logits processing (min_tokens masks EOS and "
            "stop_token_ids): no token can be sampled";
  int32_t token;
  if (params.temperature < kGreedyTemperature) {
    token = argmax(l, vocab);
    if (l[token] == kNegInf) {
      r.error = kAllMasked;
      return r;
    }
  } else {
    if (!survivor_weights(l, vocab, params, t_weights)) {
      r.error = kAllMasked;
      return r;
    }
    token = inverse_cdf(t_weights.data(), vocab, rng ? uniform_from(*rng) : u);
    if (token < 0) {
      r.error = "no token survived min_p, top_k and top_p";
      return r;
    }
  }
  if (params.logprobs < 0) {
    r.token_id = token;
    return r;
  }
  return logprobs_of(logits, vocab, token, params.logprobs);
}

}  // namespace

SampleResult sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    const std::vector<int32_t>& prompt_ids,
                    const std::vector<int32_t>& output_ids,
                    const std::vector<int32_t>& eos_token_ids, std::mt19937_64& rng,
                    const int32_t* token_bitmask) {
  return sample_with(logits, vocab, params, prompt_ids, output_ids, eos_token_ids, &rng, 0.0,
                     token_bitmask);
}

SampleResult sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    const std::vector<int32_t>& prompt_ids,
                    const std::vector<int32_t>& output_ids,
                    const std::vector<int32_t>& eos_token_ids, double u,
                    const int32_t* token_bitmask) {
  return sample_with(logits, vocab, params, prompt_ids, output_ids, eos_token_ids, nullptr, u,
                     token_bitmask);
}

SampleResult logprobs_for(const float* logits, int64_t vocab, int32_t token, int64_t k) {
  if (token < 0 || token >= vocab) {
    SampleResult r;
    r.error = "logprobs_for: token id " + std::to_string(token) +
              " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
    return r;
  }
  if (const int64_t bad = first_bad_logit<false>(logits, vocab); bad >= 0) {
    SampleResult r;
    r.error = "the model produced a non-finite logit (" + describe_logit(logits, bad) + ")";
    return r;
  }
  return logprobs_of(logits, vocab, token, k);
}

namespace {

// Top k lists up to this size are kept sorted during the softmax pass (an insertion costs O(k),
// and after the first few groups almost no logit enters); larger ones are selected afterwards.
constexpr size_t kInlineTopK = 32;

thread_local std::vector<int32_t> t_top_ids;  // large-k selection: the unmasked ids

/// The k most likely unmasked tokens of logits: [vocab], by logit descending then id ascending,
/// into `top` (fewer when fewer tokens are unmasked). O(vocab) nth_element + O(k log k) sort.
void select_top_k(const float* logits, int64_t vocab, size_t k, std::vector<int32_t>& top) {
  std::vector<int32_t>& ids = t_top_ids;
  ids.clear();
  ids.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    if (logits[i] != kNegInf) ids.push_back(static_cast<int32_t>(i));
  const auto before = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const size_t n = std::min(k, ids.size());
  if (n < ids.size()) std::nth_element(ids.begin(), ids.begin() + n, ids.end(), before);
  std::sort(ids.begin(), ids.begin() + n, before);
  top.assign(ids.begin(), ids.begin() + n);
}

SampleResult logprobs_of(const float* logits, int64_t vocab, int32_t token, int64_t k) {
  SampleResult r;
  // One pass after the max: the softmax sum, the rank and (k <= kInlineTopK) the top k.
  // log_softmax in FP32 with an FP64 sum: logprob_i = (l_i - max) - log(sum exp(l - max))
  // (subtracting the max first keeps the precision of large logits).
  const float mx = max_value(logits, vocab);
  const float lt = logits[token];
  const size_t kk = static_cast<size_t>(std::clamp<int64_t>(k, 0, vocab));
  const bool inline_top = kk <= kInlineTopK;
  std::vector<int32_t> top;  // top k ids, best first; ids arrive ascending, so ties never displace
  if (inline_top) top.reserve(kk + 1);
  // With nothing to keep inline, top_min = +inf: no group leaves the vector path.
  float top_min = kk > 0 && inline_top ? kNegInf : std::numeric_limits<float>::infinity();
  bool top_full = kk == 0 || !inline_top;
  double sum = 0.0;
  f32x4 acc{};
  i32x4 greater{};  // per lane: minus the count of logits > lt
  int64_t in_acc = 0;
  for_each4(logits, vocab, [&](int64_t i, f32x4 x) {
    acc += exp_nonpositive(x - mx);
    if (++in_acc == kBlock / 4) {  // FP32 partial sums of kBlock terms, added in FP64
      sum += static_cast<double>(acc[0]) + acc[1] + acc[2] + acc[3];
      acc = f32x4{};
      in_acc = 0;
    }
    greater += x > lt;
    // Top k: only a group with a value above the current k-th (or before the buffer is full)
    // leaves the vector path.
    const i32x4 above = top_full ? (x > top_min) : (x >= kNegInf);
    if (!(above[0] | above[1] | above[2] | above[3])) return;
    for (int64_t j = i; j < std::min(vocab, i + 4); ++j) {
      if (top_full && !(logits[j] > top_min)) continue;
      const auto at = std::upper_bound(top.begin(), top.end(), logits[j],
                                       [&](float v, int32_t id) { return v > logits[id]; });
      top.insert(at, static_cast<int32_t>(j));
      if (top.size() > kk) top.pop_back();
      top_full = top.size() == kk;
      if (top_full) top_min = logits[top.back()];
    }
  });
  sum += static_cast<double>(acc[0]) + acc[1] + acc[2] + acc[3];
  if (!inline_top) select_top_k(logits, vocab, kk, top);
  const float log_sum = static_cast<float>(std::log(sum));
  const auto logprob = [&](int64_t i) { return (logits[i] - mx) - log_sum; };

  r.token_id = token;
  r.logprob = logprob(token);
  // Rank: tokens with a larger logit, and equal ones with a lower id, come first.
  int64_t ahead = -(static_cast<int64_t>(greater[0]) + greater[1] + greater[2] + greater[3]);
  for (int64_t i = 0; i < token; ++i) ahead += logits[i] == lt;
  r.rank = ahead + 1;
  r.top_logprobs.reserve(top.size());
  for (size_t i = 0; i < top.size(); ++i)
    if (logits[top[i]] != kNegInf)  // a token masked by a grammar is no alternative
      r.top_logprobs.push_back({top[i], logprob(top[i]), static_cast<int64_t>(i) + 1});
  return r;
}

}  // namespace

}  // namespace octet
