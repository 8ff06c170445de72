#include "bench/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace octet::bench {

namespace {

std::string row(const std::string& label, const std::string& value) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-40s %-10s\n", label.c_str(), value.c_str());
  return buf;
}

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Python's "{s:{c}^{n}}": `text` centred in `width` columns of `fill` (extra fill on the right).
std::string centred(const std::string& text, char fill, size_t width = 50) {
  if (text.size() >= width) return text + "\n";
  const size_t pad = width - text.size();
  return std::string(pad / 2, fill) + text + std::string(pad - pad / 2, fill) + "\n";
}

bool selected(const RunInfo& run, const std::string& metric) {
  for (const auto& m : run.percentile_metrics)
    if (m == metric) return true;
  return false;
}

struct MetricRow {
  const char* key;
  const char* name;
  const char* header;
  const MetricStats* stats;
};

std::vector<MetricRow> metric_rows(const BenchmarkMetrics& m) {
  return {{"ttft", "TTFT", "Time to First Token", &m.ttft},
          {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &m.tpot},
          {"itl", "ITL", "Inter-token Latency", &m.itl},
          {"e2el", "E2EL", "End-to-end Latency", &m.e2el}};
}

}  // namespace

std::string percentile_word(double p) {
  if (std::floor(p) == p) return std::to_string(static_cast<long long>(p));
  std::ostringstream os;
  os << p;  // shortest form, e.g. 99.9
  return os.str();
}

std::string format_table(const BenchmarkMetrics& m, const RunInfo& run) {
  std::string s = centred(" Serving Benchmark Result ", '=');
  s += row("Successful requests:", std::to_string(m.completed));
  s += row("Failed requests:", std::to_string(m.failed));
  if (run.max_concurrency)
    s += row("Maximum request concurrency:", std::to_string(*run.max_concurrency));
  if (!std::isinf(run.request_rate))
    s += row("Request rate configured (RPS):", fixed2(run.request_rate));
  s += row("Benchmark duration (s):", fixed2(run.duration_s));
  s += row("Total input tokens:", std::to_string(m.total_input));
  s += row("Total generated tokens:", std::to_string(m.total_output));
  s += row("Request throughput (req/s):", fixed2(m.request_throughput));
  if (run.goodput) s += row("Request goodput (req/s):", fixed2(m.request_goodput));
  s += row("Output token throughput (tok/s):", fixed2(m.output_throughput));
  s += row("Peak output token throughput (tok/s):", fixed2(m.max_output_tokens_per_s));
  s += row("Peak concurrent requests:", fixed2(static_cast<double>(m.max_concurrent_requests)));
  s += row("Total token throughput (tok/s):", fixed2(m.total_token_throughput));
  for (const MetricRow& r : metric_rows(m)) {
    if (!selected(run, r.key)) continue;
    s += centred(r.header, '-');
    s += row(std::string("Mean ") + r.name + " (ms):", fixed2(r.stats->mean_ms));
    s += row(std::string("Median ") + r.name + " (ms):", fixed2(r.stats->median_ms));
    for (const auto& [p, v] : r.stats->percentiles_ms)
      s += row("P" + percentile_word(p) + " " + r.name + " (ms):", fixed2(v));
  }
  s += std::string(50, '=') + "\n";
  return s;
}

nlohmann::json result_json(const BenchmarkMetrics& m, const RunInfo& run,
                           const std::vector<RequestRecord>& records) {
  using nlohmann::json;
  json j;
  j["duration"] = run.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = run.goodput ? json(m.request_goodput) : json(nullptr);
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  json input_lens = json::array(), ttfts = json::array(), itls = json::array(),
       latencies = json::array(), starts = json::array(), queue = json::array(),
       texts = json::array(), errors = json::array();
  for (const RequestRecord& r : records) {
    input_lens.push_back(r.prompt_len);
    ttfts.push_back(r.ttft);
    itls.push_back(r.itl);
    latencies.push_back(r.latency);
    starts.push_back(r.start_time);
    queue.push_back(r.client_queue_time);
    texts.push_back(r.generated_text);
    errors.push_back(r.error);
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = m.output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["latencies"] = latencies;
  j["start_times"] = starts;
  j["queue_times"] = queue;
  j["generated_texts"] = texts;
  j["errors"] = errors;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  for (const MetricRow& r : metric_rows(m)) {
    if (!selected(run, r.key)) continue;
    const std::string k = r.key;
    j["mean_" + k + "_ms"] = r.stats->mean_ms;
    j["median_" + k + "_ms"] = r.stats->median_ms;
    j["std_" + k + "_ms"] = r.stats->std_ms;
    for (const auto& [p, v] : r.stats->percentiles_ms) j["p" + percentile_word(p) + "_" + k + "_ms"] = v;
  }
  return j;
}

}  // namespace octet::bench
