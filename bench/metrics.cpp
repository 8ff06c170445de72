#include "bench/metrics.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>

namespace octet::bench {

namespace {

// a + b for counts (both >= 0 expected), saturating at INT64_MAX instead of wrapping negative.
int64_t add_saturating(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? INT64_MAX : INT64_MIN;
  return sum;
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // numpy "linear": rank (n - 1) * p / 100, interpolated between its neighbours.
  const double rank = static_cast<double>(values.size() - 1) * p / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

MetricStats metric_stats(const std::vector<double>& values_s,
                         const std::vector<double>& percentiles) {
  MetricStats s;
  if (!values_s.empty()) {
    const double n = static_cast<double>(values_s.size());
    const double mean = std::accumulate(values_s.begin(), values_s.end(), 0.0) / n;
    double var = 0;
    for (double v : values_s) var += (v - mean) * (v - mean);
    s.mean_ms = mean * 1000;
    s.std_ms = std::sqrt(var / n) * 1000;  // population standard deviation (np.std)
    s.median_ms = percentile(values_s, 50) * 1000;
  }
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, percentile(values_s, p) * 1000);
  return s;
}

BenchmarkMetrics calculate_metrics(const std::vector<RequestRecord>& records, double duration_s,
                                   const std::function<int64_t(const std::string&)>& count_tokens,
                                   const std::vector<double>& percentiles,
                                   const GoodputSlo& goodput) {
  if (!(duration_s > 0)) throw std::invalid_argument("benchmark duration must be positive");
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, itls, e2els;
  int64_t good = 0;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      ++m.failed;
      m.output_lens.push_back(0);
      continue;
    }
    int64_t out = r.output_tokens;
    if (out <= 0) out = count_tokens ? count_tokens(r.generated_text) : 1;
    m.output_lens.push_back(out);
    m.total_input = add_saturating(m.total_input, std::max<int64_t>(r.prompt_len, 0));
    m.total_output = add_saturating(m.total_output, out);
    double tpot = 0;  // goodput reads 0 for requests of one token
    if (out > 1) {
      tpot = (r.latency - r.ttft) / static_cast<double>(out - 1);
      tpots.push_back(tpot);
    }
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
    ++m.completed;
    if (!goodput.empty()) {
      // An SLO is met when the value is at most the limit (vLLM: s >= r).
      const bool ok = (!goodput.ttft_ms || r.ttft <= *goodput.ttft_ms / 1000) &&
                      (!goodput.tpot_ms || tpot <= *goodput.tpot_ms / 1000) &&
                      (!goodput.e2el_ms || r.latency <= *goodput.e2el_ms / 1000);
      if (ok) ++good;
    }
  }
  const double dur = duration_s;
  m.request_throughput = static_cast<double>(m.completed) / dur;
  m.request_goodput = static_cast<double>(good) / dur;
  m.output_throughput = static_cast<double>(m.total_output) / dur;
  m.total_token_throughput =
      static_cast<double>(add_saturating(m.total_input, m.total_output)) / dur;
  m.ttft = metric_stats(ttfts, percentiles);
  m.tpot = metric_stats(tpots, percentiles);
  m.itl = metric_stats(itls, percentiles);
  m.e2el = metric_stats(e2els, percentiles);

  if (m.completed > 0) {
    double t0 = 0, t1 = 0;
    bool first = true;
    for (const RequestRecord& r : records) {
      if (!r.success) continue;
      t0 = first ? r.start_time : std::min(t0, r.start_time);
      t1 = first ? r.start_time + r.latency : std::max(t1, r.start_time + r.latency);
      first = false;
    }
    const size_t buckets = static_cast<size_t>(std::ceil(t1 - t0)) + 1;
    std::vector<double> per_second(buckets, 0);
    std::vector<std::pair<double, int>> events;  // (time, +1 start / -1 end)
    for (const RequestRecord& r : records) {
      if (!r.success) continue;
      double t = r.start_time + r.ttft;
      auto add = [&](double when) {
        const double b = std::floor(when - t0);
        if (b >= 0 && b < static_cast<double>(buckets)) per_second[static_cast<size_t>(b)] += 1;
      };
      add(t);
      for (double gap : r.itl) add(t += gap);
      events.emplace_back(r.start_time, 1);
      events.emplace_back(r.start_time + r.latency, -1);
    }
    m.max_output_tokens_per_s = *std::max_element(per_second.begin(), per_second.end());
    // Half-open intervals: an end at the same instant as a start is counted first.
    std::sort(events.begin(), events.end());
    int64_t now = 0;
    for (const auto& e : events) m.max_concurrent_requests = std::max(m.max_concurrent_requests, now += e.second);
  }
  return m;
}

}  // namespace octet::bench
