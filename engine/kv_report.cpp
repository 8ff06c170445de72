// `octet kv-report` (see kv_report.h): a pass-through Backend records each layer's K/V and Q
// of an exact-KV forward and, per variant, quantizes K/V on write.
#include "engine/kv_report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>

#include "config/engine_config.h"
#include "engine/calibrate.h"
#include "engine/model_loader.h"
#include "engine/sequence_forward.h"
#include "kernels/backend.h"
#include "kernels/common/fp8.h"
#include "kernels/forwarding_backend.h"
#include "models/kv_scales.h"

namespace octet {

namespace {

// Forwards every op to `inner`; write_kv_cache and paged_attention call the hooks first.
class HookBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  // on_write(layer, k, v, n) may return replacement K/V (empty: use the originals).
  std::function<void(int64_t, const float*, const float*, int64_t, std::vector<float>*,
                     std::vector<float>*)>
      on_write;
  std::function<void(int64_t, const float*, int64_t, int64_t, float)> on_attention;
  int64_t num_layers = 1;
  void reset() { writes_ = attentions_ = 0; }

  void write_kv_cache(const KVCacheView& c, const float* k, const float* v, const int64_t* slots,
                      int64_t n) override {
    const int64_t layer = writes_++ % num_layers;
    std::vector<float> k2, v2;
    if (on_write) on_write(layer, k, v, n, &k2, &v2);
    inner().write_kv_cache(c, k2.empty() ? k : k2.data(), v2.empty() ? v : v2.data(), slots, n);
  }
  void paged_attention(const KVCacheView& c, const float* q, const PagedAttentionBatch& b,
                       int64_t nh, int64_t window, float sm, float* out) override {
    const int64_t layer = attentions_++ % num_layers;
    if (on_attention) on_attention(layer, q, b.query_start_loc[b.num_seqs], nh, sm);
    inner().paged_attention(c, q, b, nh, window, sm, out);
  }

 private:
  int64_t writes_ = 0, attentions_ = 0;
};

DType format_of(const std::string& f) {
  if (f == "fp8_e4m3" || f == "fp8") return DType::FP8_E4M3;
  if (f == "fp8_e5m2") return DType::FP8_E5M2;
  throw std::invalid_argument("kv-report: format " + f + " (expected fp8_e4m3 or fp8_e5m2)");
}

struct Variant {
  DType format;
  std::string source;   // without the "+hadamard" suffix
  bool rotate = false;  // Hadamard-rotate each head row before quantizing
  // [layer][head] fixed scales (unit, tensor, attn_head); empty for per_token_head.
  std::vector<std::vector<float>> k_scale, v_scale;
  std::vector<bool> quantized;  // [layer]: false = kept in bf16 (a skip companion)
};

struct Counts {
  int64_t n = 0, clip = 0, flush = 0, sub = 0;
  double frac(int64_t x) const { return n ? static_cast<double>(x) / static_cast<double>(n) : 0.0; }
};

// x_hat = fp8(x / s) * s over one head row; counts what clips, flushes or is subnormal.
void fake_quant(DType f, const float* x, int64_t hd, float s, float* out, Counts* c) {
  // Clipped: beyond fp8_max + ulp(fp8_max) / 2 (464 for E4M3, 61440 for E5M2), values that
  // only saturation brings back; below that, round to nearest gives fp8_max anyway.
  const float clip_at = f == DType::FP8_E4M3 ? 464.0f : 61440.0f;
  const float min_normal = f == DType::FP8_E4M3 ? 0x1p-6f : 0x1p-14f;
  for (int64_t d = 0; d < hd; ++d) {
    const float y = x[d] / s;
    const float q = fp8_to_float(f, fp8_from_float(f, y));
    out[d] = q * s;
    if (!c) continue;
    ++c->n;
    c->clip += std::fabs(y) >= clip_at;
    c->flush += x[d] != 0.0f && q == 0.0f;
    c->sub += q != 0.0f && std::fabs(q) < min_normal;
  }
}

// In-place normalized fast Walsh-Hadamard transform of n (a power of two) values: H / sqrt(n)
// is orthogonal and symmetric, so applying it twice gives the input back.
void hadamard(float* x, int64_t n) {
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b, x[j + len] = a - b;
      }
  const float f = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

float row_scale(const Variant& v, bool is_k, int64_t l, int64_t h, const float* x, int64_t hd) {
  if (v.source != "per_token_head")
    return (is_k ? v.k_scale : v.v_scale)[static_cast<size_t>(l)][static_cast<size_t>(h)];
  float amax = 0;
  for (int64_t d = 0; d < hd; ++d) amax = std::fmax(amax, std::fabs(x[d]));
  const float s = amax / fp8_max_value(v.format);
  return std::isnormal(s) ? s : 1.0f;
}

// Quantizes n rows of [nkv, hd] of layer l.
std::vector<float> quantize_rows(const Variant& v, bool is_k, int64_t l, const float* x, int64_t n,
                                 int64_t nkv, int64_t hd, std::vector<Counts>* c,
                                 std::vector<float>* max_scale) {
  // With rotation the cache holds fp8(H k / s) and attention reads H q against it:
  // (H q).(H k_hat') = q.(H k_hat') since H is orthogonal, so the dequantized row seen in the
  // original basis is H (dequantized rotated row). V likewise (H undone after the weighted sum).
  std::vector<float> out(static_cast<size_t>(n * nkv * hd)), rot(static_cast<size_t>(hd));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < nkv; ++h) {
      const float* row = x + (t * nkv + h) * hd;
      if (v.rotate) {
        std::copy_n(row, hd, rot.data());
        hadamard(rot.data(), hd);
        row = rot.data();
      }
      const float s = row_scale(v, is_k, l, h, row, hd);
      if (max_scale) (*max_scale)[h] = std::max((*max_scale)[h], s);
      float* o = out.data() + (t * nkv + h) * hd;
      fake_quant(v.format, row, hd, s, o, c ? &(*c)[h] : nullptr);
      if (v.rotate) hadamard(o, hd);
    }
  return out;
}

std::vector<float> log_softmax_rows(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  std::vector<float> out(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.data() + r * vocab;
    const float mx = *std::max_element(x, x + vocab);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
    const double lse = mx + std::log(sum);
    for (int64_t i = 0; i < vocab; ++i) out[r * vocab + i] = static_cast<float>(x[i] - lse);
  }
  return out;
}

}  // namespace

std::string kv_report_builtin_text() { return kv_calibration_text(); }

KVReport run_kv_report(const KVReportOptions& o) {
  for (const std::string& f : o.formats) (void)format_of(f);
  for (const std::string& s : o.sources)
    if (s != "unit" && s != "tensor" && s != "attn_head" && s != "per_token_head" &&
        s != "unit+hadamard" && s != "per_token_head+hadamard")
      throw std::invalid_argument("kv-report: scale source " + s +
                                  " (expected unit, tensor, attn_head, per_token_head, "
                                  "unit+hadamard or per_token_head+hadamard; calibrated scales "
                                  "are of unrotated K/V and do not apply to rotated ones)");
  if (o.query_stride < 1) throw std::invalid_argument("kv-report: --query-stride must be >= 1");
  auto hook = std::make_shared<HookBackend>(std::shared_ptr<Backend>(make_backend("cpu")));
  LoadOptions lo = make_load_options(o.quantization, "channel");
  lo.backend = hook;
  lo.device = "cpu";
  const std::unique_ptr<LoadedModel> model = load_model(o.model, lo);
  const ModelConfig& c = model->model->config();
  const int64_t L = c.num_hidden_layers, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int64_t nh = c.num_attention_heads, vocab = c.vocab_size, group = nh / nkv;
  hook->num_layers = L;
  std::vector<int64_t> window(static_cast<size_t>(L), 0);
  if (static_cast<int64_t>(c.layer_sliding_window.size()) == L) window = c.layer_sliding_window;
  // The skip companions' layers, resolved against this model as serving resolves the flag.
  std::vector<int64_t> skip_list;
  if (!o.skip_layers.empty()) {
    skip_list = KVSkipLayers::parse(o.skip_layers).resolve(window);
    if (skip_list.empty())
      throw std::invalid_argument("kv-report: --kv-cache-dtype-skip-layers '" + o.skip_layers +
                                  "' selects no layer of this model (sliding_window: it has no "
                                  "sliding-window layer)");
  }
  for (const std::string& s : o.sources)
    if (s.find("+hadamard") != std::string::npos && (hd & (hd - 1)) != 0)
      throw std::invalid_argument("kv-report: " + s +
                                  " needs a power-of-two head_dim (this "
                                  "model's is " +
                                  std::to_string(hd) + ")");

  std::vector<int32_t> ids = model->tokenizer->encode(o.text, true, true);
  if (static_cast<int64_t>(ids.size()) > std::min(o.max_tokens, c.max_position_embeddings))
    ids.resize(static_cast<size_t>(std::min(o.max_tokens, c.max_position_embeddings)));
  if (ids.size() < 2) throw std::invalid_argument("kv-report: the text has fewer than 2 tokens");
  const auto n = static_cast<int64_t>(ids.size());
  auto run_ids = [&](const std::vector<int32_t>& x) {
    hook->reset();
    const auto m = static_cast<int64_t>(x.size());
    std::vector<SequenceKVCache> seq = new_sequence_caches(*model, m);
    return forward_sequence(*model, seq, x.data(), m, 0, /*all_logits=*/true);
  };
  auto run = [&]() { return run_ids(ids); };

  // Calibrated amax (per KV head) on the built-in set, the model's own forward, as `octet
  // calibrate` computes it by default (samples of at most 2048 tokens). Only when a source
  // uses it: the special-token sample alone is ~6,400 lines on Gemma 3 (its <unusedN>
  // tokens), tens of thousands of tokens; cut at the model's 32K context it cost ~10 minutes
  // of CPU per run.
  const bool calibrated = std::any_of(o.sources.begin(), o.sources.end(), [](const auto& s) {
    return s == "tensor" || s == "attn_head";
  });
  CalibrateOptions co;
  co.strategy = "attn_head";
  co.max_seq_len = std::min<int64_t>(co.max_seq_len, c.max_position_embeddings);
  KVCalibration cal;
  if (calibrated)
    cal = calibrate_kv_cache(
        *model, calibration_token_ids(*model, default_calibration_samples(), co, {}), co);

  // The exact pass: K/V/Q of every layer, and the reference logits.
  const int64_t row = nkv * hd;
  std::vector<std::vector<float>> K(L), V(L), Q(L);
  std::vector<float> softmax_scale(static_cast<size_t>(L), 1.0f);
  hook->on_write = [&](int64_t l, const float* k, const float* v, int64_t m, std::vector<float>*,
                       std::vector<float>*) {
    K[l].assign(k, k + m * row);
    V[l].assign(v, v + m * row);
  };
  hook->on_attention = [&](int64_t l, const float* q, int64_t m, int64_t heads, float sm) {
    Q[l].assign(q, q + m * heads * hd);
    softmax_scale[l] = sm;
  };
  const std::vector<float> ref = log_softmax_rows(run(), n, vocab);
  hook->on_attention = nullptr;
  // exp(mean NLL of each next token) of log-softmax rows.
  auto perplexity = [&](const std::vector<float>& lp) {
    double nll = 0;
    for (int64_t r = 0; r + 1 < n; ++r) nll -= lp[static_cast<size_t>(r * vocab + ids[r + 1])];
    return std::exp(nll / static_cast<double>(n - 1));
  };

  KVReport rep;
  rep.tokens = n;
  rep.layer_window = window;
  rep.perplexity = perplexity(ref);
  rep.num_layers = L;
  rep.num_kv_heads = nkv;
  std::vector<Variant> variants;
  for (const std::string& f : o.formats)
    for (const std::string& name : o.sources) {
      const bool rotate = name.find("+hadamard") != std::string::npos;
      const std::string s = rotate ? name.substr(0, name.find('+')) : name;
      Variant v{format_of(f), s, rotate, {}, {}, std::vector<bool>(static_cast<size_t>(L), true)};
      if (s != "per_token_head") {
        const float range = fp8_max_value(v.format) / cal.headroom;
        for (int64_t l = 0; l < L; ++l) {
          std::vector<float> ks(nkv, 1.0f), vs(nkv, 1.0f);
          if (s == "unit") {  // no calibration read (none ran when no source needs it)
            v.k_scale.push_back(ks);
            v.v_scale.push_back(vs);
            continue;
          }
          const float kt = *std::max_element(cal.k_amax[l].begin(), cal.k_amax[l].end());
          const float vt = *std::max_element(cal.v_amax[l].begin(), cal.v_amax[l].end());
          for (int64_t h = 0; h < nkv; ++h) {
            auto pick = [&](float head, float tensor) {
              const float a = s == "tensor" ? tensor : head;
              const float sc = a / range;
              return s == "unit" || !std::isnormal(sc) ? 1.0f : sc;
            };
            ks[h] = pick(cal.k_amax[l][h], kt);
            vs[h] = pick(cal.v_amax[l][h], vt);
          }
          v.k_scale.push_back(ks);
          v.v_scale.push_back(vs);
        }
      }
      variants.push_back(v);
      if (!skip_list.empty()) {  // its companion: the skip layers kept in bf16
        for (int64_t l : skip_list) v.quantized[static_cast<size_t>(l)] = false;
        variants.push_back(std::move(v));
      }
    }

  // Per layer and head statistics and attention errors.
  for (const Variant& var : variants) {
    KVVariantReport vr;
    vr.format = var.format == DType::FP8_E4M3 ? "fp8_e4m3" : "fp8_e5m2";
    vr.source = var.source + (var.rotate ? "+hadamard" : "");
    if (std::count(var.quantized.begin(), var.quantized.end(), false) > 0) {
      vr.skip_layers = skip_list;
      vr.skip_spec = o.skip_layers;
      rep.variants.push_back(std::move(vr));
      continue;  // the per-layer figures are its parent's
    }
    vr.heads.assign(static_cast<size_t>(L), std::vector<KVHeadReport>(static_cast<size_t>(nkv)));
    for (int64_t l = 0; l < L; ++l) {
      std::vector<Counts> kc(nkv), vc(nkv);
      std::vector<float> kmax(nkv, 0.0f), vmax(nkv, 0.0f);
      const std::vector<float> kq =
          quantize_rows(var, true, l, K[l].data(), n, nkv, hd, &kc, &kmax);
      const std::vector<float> vq =
          quantize_rows(var, false, l, V[l].data(), n, nkv, hd, &vc, &vmax);
      bool clips = false;
      for (int64_t h = 0; h < nkv; ++h) {
        KVHeadReport& r = vr.heads[l][h];
        for (int64_t t = 0; t < n; ++t)
          for (int64_t d = 0; d < hd; ++d) {
            r.k_amax = std::max(r.k_amax, std::fabs(K[l][(t * nkv + h) * hd + d]));
            r.v_amax = std::max(r.v_amax, std::fabs(V[l][(t * nkv + h) * hd + d]));
          }
        r.k_scale = kmax[h];
        r.v_scale = vmax[h];
        r.k_clip = kc[h].frac(kc[h].clip), r.v_clip = vc[h].frac(vc[h].clip);
        r.k_flush = kc[h].frac(kc[h].flush), r.v_flush = vc[h].frac(vc[h].flush);
        r.k_subnormal = kc[h].frac(kc[h].sub), r.v_subnormal = vc[h].frac(vc[h].sub);
        clips = clips || kc[h].clip > 0 || vc[h].clip > 0;
        // Attention of sampled queries over the exact and the quantized K/V (causal, within
        // the layer's window: keys max(0, p - W + 1)..p, as the model attends).
        double err2 = 0, norm2 = 0, max_score = 0;
        std::vector<double> s(n), sq(n), od(hd), oq(hd);
        const int64_t w = window[static_cast<size_t>(l)];
        for (int64_t p = n - 1; p >= 0; p -= o.query_stride)
          for (int64_t g = 0; g < group; ++g) {
            const float* q = Q[l].data() + (p * nh + h * group + g) * hd;
            const int64_t t0 = w > 0 ? std::max<int64_t>(0, p - w + 1) : 0;
            double mx = -1e300, mxq = -1e300;
            for (int64_t t = t0; t <= p; ++t) {
              double a = 0, b = 0;
              const size_t base = static_cast<size_t>((t * nkv + h) * hd);
              for (int64_t d = 0; d < hd; ++d) {
                a += static_cast<double>(q[d]) * K[l][base + d];
                b += static_cast<double>(q[d]) * kq[base + d];
              }
              s[t] = a * softmax_scale[l], sq[t] = b * softmax_scale[l];
              max_score = std::max(max_score, std::fabs(s[t] - sq[t]));
              mx = std::max(mx, s[t]), mxq = std::max(mxq, sq[t]);
            }
            std::fill(od.begin(), od.end(), 0.0), std::fill(oq.begin(), oq.end(), 0.0);
            double z = 0, zq = 0;
            for (int64_t t = t0; t <= p; ++t) {
              const double w = std::exp(s[t] - mx), wq = std::exp(sq[t] - mxq);
              z += w, zq += wq;
              const size_t base = static_cast<size_t>((t * nkv + h) * hd);
              for (int64_t d = 0; d < hd; ++d) {
                od[d] += w * V[l][base + d];
                oq[d] += wq * vq[base + d];
              }
            }
            for (int64_t d = 0; d < hd; ++d) {
              const double e = od[d] / z - oq[d] / zq;
              err2 += e * e;
              norm2 += (od[d] / z) * (od[d] / z);
            }
          }
        r.max_score_error = max_score;
        r.output_rel_error = norm2 > 0 ? std::sqrt(err2 / norm2) : 0.0;
      }
      if (clips) vr.clipping_layers.push_back(l);
    }
    rep.variants.push_back(std::move(vr));
  }

  // End to end: the model with K/V quantized on write in the chosen layers.
  auto measure = [&](const Variant& var, const std::vector<bool>& quantized, double* agree,
                     double* ppl) {
    hook->on_write = [&](int64_t l, const float* k, const float* v, int64_t m,
                         std::vector<float>* k2, std::vector<float>* v2) {
      if (!quantized[static_cast<size_t>(l)]) return;
      *k2 = quantize_rows(var, true, l, k, m, nkv, hd, nullptr, nullptr);
      *v2 = quantize_rows(var, false, l, v, m, nkv, hd, nullptr, nullptr);
    };
    const std::vector<float> test = log_softmax_rows(run(), n, vocab);
    hook->on_write = nullptr;
    double kl = 0;
    int64_t same = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* p = ref.data() + r * vocab;
      const float* q = test.data() + r * vocab;
      double d = 0;
      for (int64_t i = 0; i < vocab; ++i) d += std::exp(static_cast<double>(p[i])) * (p[i] - q[i]);
      kl += std::max(0.0, d);
      same += std::max_element(p, p + vocab) - p == std::max_element(q, q + vocab) - q;
    }
    if (agree) *agree = static_cast<double>(same) / static_cast<double>(n);
    if (ppl) *ppl = perplexity(test);
    return kl / static_cast<double>(n);
  };
  const std::vector<bool> all(static_cast<size_t>(L), true);
  for (size_t i = 0; i < variants.size(); ++i)
    rep.variants[i].kl = measure(variants[i], variants[i].quantized,
                                 &rep.variants[i].greedy_agreement, &rep.variants[i].perplexity);

  if (o.target_kl > 0) {
    rep.recommend_for = o.recommend_for;
    size_t which = variants.size();
    for (size_t i = 0; i < variants.size(); ++i)
      if (rep.variants[i].skip_layers.empty() &&
          rep.variants[i].format + "/" + rep.variants[i].source == o.recommend_for)
        which = i;
    if (which == variants.size())
      throw std::invalid_argument("kv-report: --recommend-for " + o.recommend_for +
                                  " is not among the variants measured (format/source)");
    for (int64_t l = 0; l < L; ++l) {
      std::vector<bool> only(static_cast<size_t>(L), false);
      only[static_cast<size_t>(l)] = true;
      rep.layer_kl.push_back(measure(variants[which], only, nullptr, nullptr));
    }
    std::vector<int64_t> order(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) order[static_cast<size_t>(l)] = l;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return rep.layer_kl[a] > rep.layer_kl[b]; });
    std::vector<bool> q = all;
    rep.kl_with_skip = rep.variants[which].kl;
    for (size_t i = 0; rep.kl_with_skip > o.target_kl && i < order.size(); ++i) {
      q[static_cast<size_t>(order[i])] = false;
      rep.skip_layers.push_back(order[i]);
      rep.kl_with_skip = measure(variants[which], q, nullptr, nullptr);
    }
    rep.target_met = rep.kl_with_skip <= o.target_kl;
    std::sort(rep.skip_layers.begin(), rep.skip_layers.end());
    std::string list;
    for (int64_t l : rep.skip_layers) list += (list.empty() ? "" : ",") + std::to_string(l);
    rep.skip_layers_flag = list.empty() ? "" : "--kv-cache-dtype-skip-layers " + list;
  }
  // Long-context probe: a copy task (random tokens, then the same tokens again); accuracy is the
  // fraction of the second half's next tokens that greedy decoding gets right.
  for (const int64_t len : o.long_context_lengths) {
    if (len < 4 || len > c.max_position_embeddings)
      throw std::invalid_argument("kv-report: --long-context length " + std::to_string(len) +
                                  " not in [4, " + std::to_string(c.max_position_embeddings) +
                                  "] (the model's context)");
    uint64_t state = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(len);
    const int64_t lo = std::max<int64_t>(3, vocab / 10), span = std::max<int64_t>(1, vocab / 2 - lo);
    std::vector<int32_t> x(static_cast<size_t>(len));
    const int64_t half = len / 2;
    for (int64_t i = 0; i < half; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x[static_cast<size_t>(i)] = static_cast<int32_t>(lo + static_cast<int64_t>((state >> 33) % span));
    }
    for (int64_t i = half; i < len; ++i) x[static_cast<size_t>(i)] = x[static_cast<size_t>(i - half)];
    // The first half is prefilled without logits and only the second half's are computed
    // ([len - half, vocab]: the lm_head over the whole sequence would cost twice the time
    // and memory, 4 GiB at 8192 tokens of a 262144-token vocabulary).
    auto accuracy = [&]() {
      hook->reset();
      std::vector<SequenceKVCache> seq = new_sequence_caches(*model, len);
      (void)forward_sequence(*model, seq, x.data(), half, 0, /*all_logits=*/false);
      const std::vector<float> logits =
          forward_sequence(*model, seq, x.data() + half, len - half, half, /*all_logits=*/true);
      int64_t right = 0, total = 0;
      for (int64_t p = half; p + 1 < len; ++p, ++total) {
        const float* l = logits.data() + (p - half) * vocab;
        right += std::max_element(l, l + vocab) - l == x[static_cast<size_t>(p + 1)];
      }
      return total ? static_cast<double>(right) / static_cast<double>(total) : 0.0;
    };
    KVReport::LongContextRow row;
    row.length = len;
    row.exact_accuracy = accuracy();
    for (const Variant& var : variants) {
      hook->on_write = [&](int64_t l, const float* k, const float* v, int64_t m,
                           std::vector<float>* k2, std::vector<float>* v2) {
        if (!var.quantized[static_cast<size_t>(l)]) return;
        *k2 = quantize_rows(var, true, l, k, m, nkv, hd, nullptr, nullptr);
        *v2 = quantize_rows(var, false, l, v, m, nkv, hd, nullptr, nullptr);
      };
      row.accuracy.push_back(accuracy());
      hook->on_write = nullptr;
    }
    rep.long_context.push_back(row);
  }
  return rep;
}

}  // namespace octet
