#include "kernels/cpu/sample_rows.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace octet {
namespace {

using namespace sampling_math;

thread_local std::vector<float> t_w;        // survivor weights: [width]
thread_local std::vector<float> t_sorted;   // top_k selection: [width]
thread_local std::vector<uint64_t> t_keys;  // top_p bucket, in walk order

/// Zeroes w outside the top_p nucleus (engine/sampler.cpp keep_nucleus, written as a full sort
/// of the crossing bucket).
void nucleus(std::vector<float>& w, int64_t n, float top_p) {
  double mass[256] = {};
  for (int64_t i = 0; i < n; ++i) mass[float_bits(w[i]) >> 23] += w[i];  // exact: order-free
  const NucleusCrossing start = nucleus_crossing(mass, top_p);
  const double target = start.target;
  double before = start.before;
  const int crossing = start.crossing;
  std::vector<uint64_t>& keys = t_keys;
  keys.clear();
  for (int64_t i = 0; i < n; ++i)
    if (static_cast<int>(float_bits(w[i]) >> 23) == crossing && w[i] > 0.0f)
      keys.push_back(nucleus_key(w[i], i));
  if (keys.empty()) return;
  std::sort(keys.begin(), keys.end());
  int64_t last_id = static_cast<uint32_t>(keys[0]);
  for (uint64_t k : keys) {
    if (before >= target) break;
    const int64_t id = static_cast<uint32_t>(k);
    before += w[id];
    last_id = id;
  }
  const float last_w = w[last_id];
  for (int64_t i = 0; i < n; ++i)
    if (!in_nucleus(w[i], i, last_w, last_id)) w[i] = 0.0f;
}

}  // namespace

void sample_row_weights(const float* x, int64_t width, const SampleRowParams& p,
                        std::vector<float>& w) {
  const float mx = *std::max_element(x, x + width);
  float threshold = -INFINITY;
  if (p.top_k > 0 && p.top_k < width) {
    std::vector<float>& s = t_sorted;
    s.assign(x, x + width);
    std::nth_element(s.begin(), s.begin() + (p.top_k - 1), s.end(), std::greater<float>());
    threshold = s[static_cast<size_t>(p.top_k - 1)];
  }
  w.resize(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i)
    w[i] = survivor_weight(x[i], mx, p.inv_temperature, threshold, p.min_p);
  if (p.top_p < 1.0f) nucleus(w, width, p.top_p);
}

int32_t sample_row_reference(const float* x, int64_t width, const SampleRowParams& p,
                             const LogitEdit* edits) {
  if (p.mode == SampleRowParams::kSkip) return kSampleSkipped;
  for (int64_t i = 0; i < width; ++i)
    if (!std::isfinite(x[i])) return kSampleNonFinite;
  if (p.edit_count > 0) {
    thread_local std::vector<float> t_processed;
    t_processed.assign(x, x + width);
    for (int32_t k = 0; k < p.edit_count; ++k) {
      const LogitEdit& e = edits[p.edit_begin + k];
      float& l = t_processed[static_cast<size_t>(e.token)];
      l = apply_edit(l, e);
      if (std::isnan(l) || l == INFINITY) return kSampleNonFinite;
    }
    x = t_processed.data();
    if (*std::max_element(x, x + width) == -INFINITY) return kSampleNonFinite;
  }
  if (p.mode == SampleRowParams::kGreedy)
    return static_cast<int32_t>(std::max_element(x, x + width) - x);  // the first of equals
  sample_row_weights(x, width, p, t_w);
  return inverse_cdf(t_w.data(), width, p.u);
}

}  // namespace octet
