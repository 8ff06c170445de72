// vLLM's serving metrics (bench/metrics.h) on scripted request records, every expected value
// worked out by hand in the comments (no sockets: exact to well below a millisecond).
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "bench/metrics.h"

using namespace octet::bench;

namespace {

// Approx with an absolute margin of 1 ns (milliseconds) / 1e-9 (rates).
Approx exact(double v) { return Approx(v).margin(1e-9); }

// The script (seconds):
//   R0 sent at 0.0: first text at +0.100, then gaps 0.020 0.030 0.040 (4 chunks), usage says 4
//      completion tokens, prompt 10 tokens; E2EL 0.100 + 0.090 = 0.190.
//   R1 sent at 0.5: first text at +0.200, one gap 0.050, no usage: generated "a b" counts as
//      2 tokens (the counter below counts words); prompt 20; E2EL 0.250.
//   R2 sent at 1.0: one chunk at +0.300, usage 1 token, prompt 30; E2EL 0.300.
//   R3 sent at 0.2: failed (HTTP 500).
std::vector<RequestRecord> script() {
  std::vector<RequestRecord> r(4);
  r[0] = {true, "", 0.0, 0.100, {0.020, 0.030, 0.040}, 0.190, 10, 4, "abcd", 0};
  r[1] = {true, "", 0.5, 0.200, {0.050}, 0.250, 20, 0, "a b", 0};
  r[2] = {true, "", 1.0, 0.300, {}, 0.300, 30, 1, "x", 0};
  r[3] = {false, "HTTP 500 Internal Server Error", 0.2, 0, {}, 0, 40, 0, "", 0};
  return r;
}

int64_t words(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    if (c != ' ' && !in) ++n;
    in = c != ' ';
  }
  return n;
}

}  // namespace

TEST_CASE("percentile interpolates linearly between closest ranks, as numpy") {
  // [1,2,3,4]: rank (n-1)p/100. p25 -> rank 0.75 -> 1 + 0.75 = 1.75; p50 -> 2.5; p100 -> 4.
  CHECK(percentile({4, 1, 3, 2}, 25) == exact(1.75));
  CHECK(percentile({4, 1, 3, 2}, 50) == exact(2.5));
  CHECK(percentile({4, 1, 3, 2}, 100) == exact(4));
  CHECK(percentile({4, 1, 3, 2}, 0) == exact(1));
  CHECK(percentile({7}, 99) == exact(7));
  CHECK(percentile({}, 99) == 0);  // vLLM: np.percentile(xs or 0, p)
}

TEST_CASE("counts, tokens and throughputs over the wall time") {
  const BenchmarkMetrics m = calculate_metrics(script(), 2.0, words, {99}, {});
  CHECK(m.completed == 3);
  CHECK(m.failed == 1);
  CHECK(m.total_input == 60);        // 10 + 20 + 30; the failed request's prompt is not counted
  CHECK(m.total_output == 7);        // 4 (usage) + 2 (re-counted "a b") + 1 (usage)
  CHECK(m.output_lens == std::vector<int64_t>{4, 2, 1, 0});
  CHECK(m.request_throughput == exact(1.5));       // 3 / 2 s
  CHECK(m.output_throughput == exact(3.5));        // 7 / 2 s
  CHECK(m.total_token_throughput == exact(33.5));  // 67 / 2 s
  CHECK(m.request_goodput == 0);  // no SLO given
}

TEST_CASE("TTFT, TPOT, ITL and E2EL statistics in milliseconds") {
  const BenchmarkMetrics m = calculate_metrics(script(), 2.0, words, {50, 99}, {});
  // TTFT [100, 200, 300]: mean 200, median 200, population std sqrt((100^2 + 0 + 100^2)/3)
  // = 81.6497, p99: rank 2 x 0.99 = 1.98 -> 200 + 0.98 x 100 = 298.
  CHECK(m.ttft.mean_ms == exact(200));
  CHECK(m.ttft.median_ms == exact(200));
  CHECK(m.ttft.std_ms == Approx(std::sqrt(20000.0 / 3)).margin(1e-9));
  REQUIRE(m.ttft.percentiles_ms.size() == 2);
  CHECK(m.ttft.percentiles_ms[0].first == 50);
  CHECK(m.ttft.percentiles_ms[0].second == exact(200));
  CHECK(m.ttft.percentiles_ms[1].second == exact(298));
  // TPOT = (E2EL - TTFT) / (tokens - 1): R0 (190 - 100) / 3 = 30, R1 (250 - 200) / 1 = 50,
  // R2 has one token and no TPOT. Mean 40, median 40, std 10, p99 30 + 0.99 x 20 = 49.8.
  CHECK(m.tpot.mean_ms == exact(40));
  CHECK(m.tpot.median_ms == exact(40));
  CHECK(m.tpot.std_ms == exact(10));
  CHECK(m.tpot.percentiles_ms[1].second == exact(49.8));
  // ITL pools every gap: [20, 30, 40, 50]: mean 35, median (30 + 40)/2 = 35,
  // std sqrt((225 + 25 + 25 + 225)/4) = sqrt(125), p99: rank 2.97 -> 40 + 0.97 x 10 = 49.7.
  CHECK(m.itl.mean_ms == exact(35));
  CHECK(m.itl.median_ms == exact(35));
  CHECK(m.itl.std_ms == Approx(std::sqrt(125.0)).margin(1e-9));
  CHECK(m.itl.percentiles_ms[1].second == exact(49.7));
  // E2EL [190, 250, 300]: mean 740/3, median 250, p99: rank 1.98 -> 250 + 0.98 x 50 = 299.
  CHECK(m.e2el.mean_ms == exact(740.0 / 3));
  CHECK(m.e2el.median_ms == exact(250));
  CHECK(m.e2el.percentiles_ms[1].second == exact(299));
}

TEST_CASE("peak output tokens per 1-second bucket and peak concurrency") {
  const BenchmarkMetrics m = calculate_metrics(script(), 2.0, words, {99}, {});
  // Token arrivals: R0 at 0.100, 0.120, 0.150, 0.190; R1 at 0.700, 0.750; R2 at 1.300.
  // Buckets from the earliest start (0.0): [0,1) holds 6, [1,2) holds 1.
  CHECK(m.max_output_tokens_per_s == 6);
  // Intervals [0, 0.19), [0.5, 0.75), [1.0, 1.3) never overlap.
  CHECK(m.max_concurrent_requests == 1);

  // [0,1), [0.5,2), [0.9,1.0) overlap in [0.9,1.0): 3. [0,1) then [1,2): half-open, 1.
  std::vector<RequestRecord> r(3);
  r[0] = {true, "", 0.0, 0.5, {}, 1.0, 1, 1, "", 0};
  r[1] = {true, "", 0.5, 0.5, {}, 1.5, 1, 1, "", 0};
  r[2] = {true, "", 0.9, 0.05, {}, 0.1, 1, 1, "", 0};
  CHECK(calculate_metrics(r, 2.0, words, {}, {}).max_concurrent_requests == 3);
  std::vector<RequestRecord> seq(2);
  seq[0] = {true, "", 0.0, 0.5, {}, 1.0, 1, 1, "", 0};
  seq[1] = {true, "", 1.0, 0.5, {}, 1.0, 1, 1, "", 0};
  CHECK(calculate_metrics(seq, 2.0, words, {}, {}).max_concurrent_requests == 1);
}

TEST_CASE("goodput counts requests meeting every SLO") {
  GoodputSlo slo;
  // ttft <= 250 and tpot <= 40: R0 (100, 30) yes; R1 (200, 50) no; R2 (300, -) no -> 1 / 2 s.
  slo.ttft_ms = 250;
  slo.tpot_ms = 40;
  CHECK(calculate_metrics(script(), 2.0, words, {}, slo).request_goodput == exact(0.5));
  // e2el <= 260: R0 190 yes, R1 250 yes, R2 300 no -> 2 / 2 s = 1.
  GoodputSlo e2el;
  e2el.e2el_ms = 260;
  CHECK(calculate_metrics(script(), 2.0, words, {}, e2el).request_goodput == exact(1.0));
  // tpot <= 10: R0 30 no, R1 50 no, R2 has one token, its TPOT counts as 0: yes -> 0.5.
  GoodputSlo tpot;
  tpot.tpot_ms = 10;
  CHECK(calculate_metrics(script(), 2.0, words, {}, tpot).request_goodput == exact(0.5));
  // The limit itself is met (vLLM: slo >= value): ttft <= 100 keeps R0 only.
  GoodputSlo edge;
  edge.ttft_ms = 100;
  CHECK(calculate_metrics(script(), 2.0, words, {}, edge).request_goodput == exact(0.5));
}

TEST_CASE("all requests failed: zeros, no crash, a zero duration is an error") {
  std::vector<RequestRecord> r(2);
  r[0].error = "refused";
  r[1].error = "refused";
  const BenchmarkMetrics m = calculate_metrics(r, 1.0, words, {99}, {});
  CHECK(m.completed == 0);
  CHECK(m.failed == 2);
  CHECK(m.ttft.mean_ms == 0);
  CHECK(m.ttft.percentiles_ms[0].second == 0);
  CHECK(m.max_output_tokens_per_s == 0);
  CHECK_THROWS_AS(calculate_metrics(r, 0.0, words, {99}, {}), std::invalid_argument);
}
