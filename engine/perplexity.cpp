#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "engine/model_loader.h"
#include "engine/sequence_forward.h"
#include "kernels/rank_group.h"

namespace octet {

namespace {

LoadOptions load_options(const PerplexityOptions& o, const std::string& quantization) {
  LoadOptions lo = make_load_options(quantization, o.weight_strategy);
  lo.device = o.device;
  lo.world_size = static_cast<int>(o.tensor_parallel_size);
  lo.lm_head_dtype = o.lm_head_dtype;
  spdlog::info("{}", configure_cpu_threads(static_cast<int>(o.threads)));
  return lo;
}

ModelSource model_source(const PerplexityOptions& o) {
  ModelSource s;
  s.model = o.model;
  s.load_format = o.load_format;
  s.tokenizer = o.tokenizer;
  return s;
}

// log-softmax of one row in double: logp[i] = x[i] - max - log(sum exp(x - max)).
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(n);
  const float mx = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  const double lse = std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(x[i] - mx) - lse;
}

// Logits for every position of ids, window by window, chunked so memory stays
// chunk * vocab floats. visit(pos_in_ids, logits_row) for every position that predicts the
// next token within its window.
template <class Visit>
void for_each_prediction(const LoadedModel& model, const std::vector<int32_t>& ids,
                         int64_t window, Visit&& visit) {
  const int64_t vocab = model.model->config().vocab_size, chunk = 128;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t w0 = 0; w0 < n; w0 += window) {
    const int64_t wn = std::min(window, n - w0);
    if (wn < 2) break;
    std::vector<SequenceKVCache> cache = new_sequence_caches(model, wn);  // one per rank
    for (int64_t c0 = 0; c0 < wn; c0 += chunk) {
      const int64_t cn = std::min(chunk, wn - c0);
      const std::vector<float> logits =
          forward_sequence(model, cache, ids.data() + w0 + c0, cn, c0, true);
      for (int64_t i = 0; i < cn; ++i)
        if (c0 + i + 1 < wn) visit(w0 + c0 + i, logits.data() + i * vocab);
    }
  }
}

}  // namespace

PerplexityResult compute_perplexity_ids(const PerplexityOptions& o,
                                        const std::vector<int32_t>& all_ids) {
  if (o.max_tokens < 2) throw std::invalid_argument("max_tokens must be at least 2");
  std::vector<int32_t> ids(all_ids.begin(),
                           all_ids.begin() + std::min<int64_t>(o.max_tokens, all_ids.size()));
  if (ids.size() < 2) throw std::invalid_argument("the text has fewer than 2 tokens");
  auto lm = load_model(model_source(o), load_options(o, o.quantization));
  const LlamaModel& model = *lm->model;
  const int64_t vocab = model.config().vocab_size;
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw std::invalid_argument("token id " + std::to_string(id) + " outside the vocabulary");

  PerplexityResult r;
  r.tokens = static_cast<int64_t>(ids.size());
  r.window = std::min<int64_t>(r.tokens, model.config().max_position_embeddings);
  r.linear_format = model.linear_format();

  // Log-probabilities of the model under test, kept per position when comparing
  // (tokens * vocab floats: 400 MB for 2048 tokens of a 49152-token vocabulary).
  std::vector<std::vector<float>> kept;
  std::vector<int64_t> kept_pos;
  std::vector<double> lp;
  double nll = 0.0;
  int64_t count = 0;
  for_each_prediction(*lm, ids, r.window, [&](int64_t pos, const float* row) {
    log_softmax(row, vocab, lp);
    nll -= lp[ids[pos + 1]];
    ++count;
    if (o.compare) {
      kept.emplace_back(lp.begin(), lp.end());
      kept_pos.push_back(pos);
    }
  });
  r.perplexity = std::exp(nll / static_cast<double>(count));
  if (!o.compare) return r;

  lm.reset();  // free the quantized model before loading the reference
  auto ref_lm = load_model(model_source(o), load_options(o, "none"));
  double ref_nll = 0.0, kl = 0.0;
  int64_t agree = 0, idx = 0;
  std::vector<double> lq;
  for_each_prediction(*ref_lm, ids, r.window, [&](int64_t pos, const float* row) {
    log_softmax(row, vocab, lq);  // reference distribution P
    ref_nll -= lq[ids[pos + 1]];
    const std::vector<float>& lm_q = kept[idx++];
    double k = 0.0;
    int64_t a_ref = 0, a_q = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      k += std::exp(lq[i]) * (lq[i] - static_cast<double>(lm_q[i]));
      if (lq[i] > lq[a_ref]) a_ref = i;
      if (lm_q[i] > lm_q[a_q]) a_q = i;
    }
    kl += k;
    agree += a_ref == a_q;
  });
  r.reference_perplexity = std::exp(ref_nll / static_cast<double>(count));
  r.kl_divergence = std::max(0.0, kl / static_cast<double>(count));  // >= 0 up to rounding
  r.top1_agreement = static_cast<double>(agree) / static_cast<double>(count);
  return r;
}

PerplexityResult compute_perplexity(const PerplexityOptions& o, const std::string& text) {
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(model_source(o));
  return compute_perplexity_ids(o, tok->encode(text, /*add_special=*/true,
                                               /*parse_special=*/false));
}

}  // namespace octet
