#include "server/openai/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace octet::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size(), 0) {}

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(mu_);
  // First bucket whose bound is >= value (Prometheus buckets are "less than or equal").
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  if (it != bounds_.end()) ++counts_[static_cast<size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.upper_bounds = bounds_;
  int64_t running = 0;
  for (int64_t c : counts_) s.cumulative_counts.push_back(running += c);
  s.count = count_;
  s.sum = sum_;
  return s;
}

// vllm/v1/metrics/loggers.py (PrometheusStatLogger).
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

void ServerMetrics::record_finish(const std::string& finish_reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[finish_reason];
}

std::map<std::string, int64_t> ServerMetrics::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::ostringstream os;
    os << static_cast<int64_t>(v);
    return os.str();
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_float(float v) {
  if (!std::isfinite(v)) return format_value(v);
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {

class Page {
 public:
  explicit Page(const std::string& model_name)
      : model_label_("model_name=\"" + escape_label(model_name) + "\"") {}

  void header(const std::string& name, const char* type, const char* help) {
    os_ << "# HELP octet:" << name << " " << help << "\n# TYPE octet:" << name << " " << type
        << "\n";
  }
  void sample(const std::string& name, double value, const std::string& labels = "") {
    sample_text(name, format_value(value), labels);
  }
  void sample_text(const std::string& name, const std::string& value,
                   const std::string& labels) {
    os_ << "octet:" << name << "{" << model_label_ << (labels.empty() ? "" : ",") << labels
        << "} " << value << "\n";
  }
  void scalar(const std::string& name, const char* type, const char* help, double value) {
    header(name, type, help);
    sample(name, value);
  }
  void histogram(const std::string& name, const char* help, const Histogram::Snapshot& s) {
    header(name, "histogram", help);
    for (size_t i = 0; i < s.upper_bounds.size(); ++i)
      sample(name + "_bucket", static_cast<double>(s.cumulative_counts[i]),
             "le=\"" + format_value(s.upper_bounds[i]) + "\"");
    sample(name + "_bucket", static_cast<double>(s.count), "le=\"+Inf\"");
    sample(name + "_sum", s.sum);
    sample(name + "_count", static_cast<double>(s.count));
  }
  std::string str() const { return os_.str(); }

 private:
  std::string model_label_;
  std::ostringstream os_;
};

}  // namespace

std::string render_metrics(const std::string& model_name, const EngineStats& st,
                           const std::vector<KVLayerInfo>& kv_layers,
                           const ServerMetrics& m) {
  Page p(model_name);
  p.scalar("num_requests_running", "gauge", "Number of requests in model execution batches.",
           static_cast<double>(st.num_requests_running));
  p.scalar("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           static_cast<double>(st.num_requests_waiting));
  p.scalar("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           st.kv_cache_usage);
  p.scalar("kv_cache_num_blocks", "gauge", "Usable KV cache blocks.",
           static_cast<double>(st.num_kv_blocks));
  p.scalar("kv_cache_num_free_blocks", "gauge", "Free KV cache blocks.",
           static_cast<double>(st.num_free_kv_blocks));
  p.scalar("engine_alive", "gauge", "1 while the engine thread runs, 0 once it has died.",
           st.alive ? 1.0 : 0.0);
  p.scalar("num_preemptions_total", "counter", "Cumulative number of preemptions.",
           static_cast<double>(st.num_preemptions));
  p.scalar("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           static_cast<double>(st.prompt_tokens));
  p.scalar("generation_tokens_total", "counter", "Number of generation tokens processed.",
           static_cast<double>(st.generation_tokens));
  p.scalar("prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.",
           static_cast<double>(st.prefix_cache_queries));
  p.scalar("prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.",
           static_cast<double>(st.prefix_cache_hits));
  p.scalar("num_steps_total", "counter", "Engine steps run.", static_cast<double>(st.num_steps));

  p.header("request_success_total", "counter", "Count of successfully processed requests.");
  auto finished = m.finished();
  for (const char* reason : {"stop", "length", "abort"}) finished.emplace(reason, 0);
  for (const auto& [reason, count] : finished)
    p.sample("request_success_total", static_cast<double>(count),
             "finished_reason=\"" + escape_label(reason) + "\"");

  p.histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.time_to_first_token.snapshot());
  p.histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              m.inter_token_latency.snapshot());
  p.histogram("e2e_request_latency_seconds",
              "Histogram of e2e request latency in seconds.", m.e2e_request_latency.snapshot());
  p.histogram("request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.",
              m.request_queue_time.snapshot());

  if (!kv_layers.empty()) {
    p.header("kv_cache_layer_info", "gauge",
             "KV cache dtype, scale source and sliding window of each layer (value 1).");
    for (size_t i = 0; i < kv_layers.size(); ++i) {
      const KVLayerInfo& l = kv_layers[i];
      p.sample("kv_cache_layer_info", 1.0,
               "layer=\"" + std::to_string(i) + "\",dtype=\"" + escape_label(l.dtype) +
                   "\",scale_source=\"" + escape_label(l.scale_source) +
                   "\",sliding_window=\"" + std::to_string(l.sliding_window) + "\"");
    }
    const struct {
      const char* name;
      const char* help;
      std::vector<float> KVLayerInfo::*scales;
    } kinds[] = {{"kv_cache_k_scale", "FP8 K cache scale per layer and KV head.",
                  &KVLayerInfo::k_scale},
                 {"kv_cache_v_scale", "FP8 V cache scale per layer and KV head.",
                  &KVLayerInfo::v_scale}};
    for (const auto& kind : kinds) {
      bool any = false;
      for (const auto& l : kv_layers) any = any || !(l.*kind.scales).empty();
      if (!any) continue;
      p.header(kind.name, "gauge", kind.help);
      for (size_t i = 0; i < kv_layers.size(); ++i) {
        const auto& scales = kv_layers[i].*kind.scales;
        for (size_t h = 0; h < scales.size(); ++h)
          p.sample_text(kind.name, format_float(scales[h]),
                   "layer=\"" + std::to_string(i) + "\",kv_head=\"" + std::to_string(h) + "\"");
      }
    }
  }

  // Sampled FP8 clipping (engine/kv_saturation.h): one series per counted layer and tensor.
  if (!st.kv_saturation.empty()) {
    const struct {
      const char* name;
      const char* help;
      int64_t KVLayerSaturation::*k;
      int64_t KVLayerSaturation::*v;
    } families[] = {
        {"kv_cache_sampled_values_total",
         "K/V values of FP8 static-scale layers read back from the cache by the sampled "
         "clipping check (a few tokens of every N-th engine step).",
         &KVLayerSaturation::k_sampled, &KVLayerSaturation::v_sampled},
        {"kv_cache_saturated_values_total",
         "Sampled K/V values stored at the FP8 format's largest magnitude (448 x scale for "
         "E4M3): clipped, or within half a step of clipping.",
         &KVLayerSaturation::k_saturated, &KVLayerSaturation::v_saturated},
        {"kv_cache_underflow_values_total",
         "Sampled K/V values stored as FP8 zero or subnormal (below 2^-6 x scale for E4M3).",
         &KVLayerSaturation::k_underflow, &KVLayerSaturation::v_underflow}};
    for (const auto& f : families) {
      p.header(f.name, "counter", f.help);
      for (const KVLayerSaturation& l : st.kv_saturation)
        for (const auto& [tensor, field] : {std::pair{"k", f.k}, std::pair{"v", f.v}})
          p.sample(f.name, static_cast<double>(l.*field),
                   "layer=\"" + std::to_string(l.layer) + "\",tensor=\"" + tensor + "\"");
    }
  }
  return p.str();
}

}  // namespace octet::server
