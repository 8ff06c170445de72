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

Histogram::Snapshot Histogram::Snapshot::up_to(double max_bound) const {
  Snapshot s;
  for (size_t i = 0; i < upper_bounds.size() && upper_bounds[i] <= max_bound; ++i) {
    s.upper_bounds.push_back(upper_bounds[i]);
    s.cumulative_counts.push_back(cumulative_counts[i]);
  }
  s.count = count;
  s.sum = sum;
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
std::vector<double> iteration_tokens_buckets() {
  return {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}
std::vector<double> params_n_buckets() { return {1, 2, 5, 10, 20}; }
std::vector<double> num_preemptions_buckets() { return {1, 2, 3, 4, 5, 10, 20}; }
std::vector<double> one_two_five_buckets(double max_value) {
  std::vector<double> b;
  for (double scale = 1.0;; scale *= 10.0)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > max_value) return b;
      b.push_back(m * scale);
    }
}

void ServerMetrics::record_finish(const std::string& finish_reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[finish_reason];
}

void ServerMetrics::record_finished_request(const RequestOutput& out) {
  record_finish(out.error.empty() ? out.finish_reason : "error");
  e2e_request_latency.observe(out.e2e_time_s);
  request_queue_time.observe(out.queue_time_s);
  // vLLM observes every finished request, 0 when fewer than two tokens were generated.
  request_time_per_output_token.observe(
      out.num_generated_tokens > 1
          ? (out.e2e_time_s - out.first_token_time_s) / static_cast<double>(out.num_generated_tokens - 1)
          : 0.0);
  if (out.num_generated_tokens > 0) {
    time_to_first_token.observe(out.first_token_time_s);
    request_prefill_time.observe(out.first_token_time_s - out.queue_time_s);
    request_decode_time.observe(out.e2e_time_s - out.first_token_time_s);
    request_inference_time.observe(out.e2e_time_s - out.queue_time_s);
  }
  request_prompt_tokens.observe(static_cast<double>(out.num_prompt_tokens));
  request_generation_tokens.observe(static_cast<double>(out.num_generated_tokens));
  request_prefill_kv_computed_tokens.observe(
      static_cast<double>(out.num_prompt_tokens - std::max<int64_t>(out.num_cached_tokens, 0)));
  request_num_preemptions.observe(static_cast<double>(out.num_preemptions));
  if (out.max_tokens > 0) request_params_max_tokens.observe(static_cast<double>(out.max_tokens));
}

std::map<std::string, int64_t> ServerMetrics::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void ServerMetrics::record_admission_rejection() {
  std::lock_guard<std::mutex> lock(mu_);
  ++admission_rejections_;
}

int64_t ServerMetrics::admission_rejections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return admission_rejections_;
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

std::string format_le(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Python's repr(float) (fixed notation for the bounds in use, 1e-4 <= v < 1e16), then
  // prometheus_client's switch to Go's exponent form for 7+ integer digits.
  char buf[400];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  std::string s(buf, r.ptr);
  if (s.find('.') == std::string::npos) s += ".0";
  const size_t dot = s.find('.');
  if (v > 0 && dot > 6) {
    std::string mantissa = s.substr(0, 1) + "." + s.substr(1, dot - 1) + s.substr(dot + 1);
    while (!mantissa.empty() && (mantissa.back() == '0' || mantissa.back() == '.'))
      mantissa.pop_back();
    return mantissa + "e+0" + std::to_string(dot - 1);
  }
  return s;
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

// "True"/"False"/"None" and str(float) as vLLM's CacheConfig.metrics_info() writes them.
std::string py_bool(bool b) { return b ? "True" : "False"; }
std::string py_int_or_none(int64_t v) { return v > 0 ? std::to_string(v) : "None"; }
std::string py_float(double v) {
  char buf[400];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  std::string s(buf, r.ptr);
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

class Page {
 public:
  explicit Page(const std::string& model_name)
      : model_name_(model_name),
        octet_labels_("model_name=\"" + escape_label(model_name) + "\""),
        vllm_labels_(octet_labels_ + ",engine=\"0\"") {}

  const std::string& model_name() const { return model_name_; }

  void header(const std::string& name, const char* type, const char* help) {
    os_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  // A sample of a vllm: family (model_name, engine, then `labels`) or an octet: one
  // (model_name, then `labels`).
  void sample(const std::string& name, double value, const std::string& labels = "") {
    sample_text(name, format_value(value), labels);
  }
  void sample_text(const std::string& name, const std::string& value,
                   const std::string& labels) {
    const std::string& base = name.rfind("vllm:", 0) == 0 ? vllm_labels_ : octet_labels_;
    os_ << name << "{" << base << (labels.empty() ? "" : ",") << labels << "} " << value
        << "\n";
  }
  void raw(const std::string& line) { os_ << line << "\n"; }
  void scalar(const std::string& name, const char* type, const char* help, double value) {
    header(name, type, help);
    sample(name, value);
  }
  void histogram(const std::string& name, const char* help, const Histogram::Snapshot& s) {
    header(name, "histogram", help);
    for (size_t i = 0; i < s.upper_bounds.size(); ++i)
      sample(name + "_bucket", static_cast<double>(s.cumulative_counts[i]),
             "le=\"" + format_le(s.upper_bounds[i]) + "\"");
    sample(name + "_bucket", static_cast<double>(s.count), "le=\"+Inf\"");
    sample(name + "_sum", s.sum);
    sample(name + "_count", static_cast<double>(s.count));
  }
  std::string str() const { return os_.str(); }

 private:
  std::string model_name_, octet_labels_, vllm_labels_;
  std::ostringstream os_;
};

// vllm:iteration_tokens_total from the engine's power-of-two step counts: every vLLM bound
// is a power of two, so its cumulative count is a prefix sum of EngineStats::step_tokens_log2.
Histogram::Snapshot iteration_tokens(const EngineStats& st) {
  Histogram::Snapshot s;
  s.upper_bounds = iteration_tokens_buckets();
  int64_t running = 0;
  size_t k = 0;
  for (double bound : s.upper_bounds) {
    for (; k < st.step_tokens_log2.size() && std::ldexp(1.0, static_cast<int>(k)) <= bound; ++k)
      running += st.step_tokens_log2[k];
    s.cumulative_counts.push_back(running);
  }
  for (int64_t c : st.step_tokens_log2) s.count += c;
  s.sum = static_cast<double>(st.step_tokens_sum);
  return s;
}

void render_vllm(Page& p, const EngineMetricsView& e, const ServerMetrics& m) {
  const EngineStats& st = e.stats;
  p.scalar("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           static_cast<double>(st.num_requests_running));
  p.scalar("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           static_cast<double>(st.num_requests_waiting));
  // octet defers no waiting request (no LoRA budget, KV transfer or blocked state): every
  // waiting request waits for capacity.
  p.header("vllm:num_requests_waiting_by_reason", "gauge",
           "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
           "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV "
           "transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.");
  p.sample("vllm:num_requests_waiting_by_reason", static_cast<double>(st.num_requests_waiting),
           "reason=\"capacity\"");
  p.sample("vllm:num_requests_waiting_by_reason", 0.0, "reason=\"deferred\"");
  p.scalar("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           st.kv_cache_usage);
  p.scalar("vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.",
           static_cast<double>(st.prefix_cache_queries));
  p.scalar("vllm:prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.",
           static_cast<double>(st.prefix_cache_hits));
  p.scalar("vllm:num_preemptions_total", "counter",
           "Cumulative number of preemption from the engine.",
           static_cast<double>(st.num_preemptions));
  // Admission is the API server's, not an engine's: model_name and reason only (as vLLM). octet
  // has no limit on queued tokens: that reason stays 0.
  p.header("vllm:admission_rejections_total", "counter",
           "Number of requests rejected at admission (HTTP 503) because the queue was full.");
  p.raw("vllm:admission_rejections_total{model_name=\"" + escape_label(p.model_name()) +
        "\",reason=\"max_num_queued_reqs\"} " +
        format_value(static_cast<double>(m.admission_rejections())));
  p.raw("vllm:admission_rejections_total{model_name=\"" + escape_label(p.model_name()) +
        "\",reason=\"max_num_queued_tokens\"} 0");
  p.scalar("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           static_cast<double>(st.prompt_tokens));
  p.scalar("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           static_cast<double>(st.generation_tokens));

  p.header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  auto finished = m.finished();
  // vLLM's FinishReason values, each with a series from the start.
  for (const char* reason : {"stop", "length", "abort", "error", "repetition"})
    finished.emplace(reason, 0);
  for (const auto& [reason, count] : finished)
    p.sample("vllm:request_success_total", static_cast<double>(count),
             "finished_reason=\"" + escape_label(reason) + "\"");

  const double max_len = static_cast<double>(e.max_model_len);
  p.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
              m.request_prompt_tokens.snapshot().up_to(max_len));
  p.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              m.request_generation_tokens.snapshot().up_to(max_len));
  p.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              iteration_tokens(st));
  p.histogram("vllm:request_params_n", "Histogram of the n request parameter.",
              m.request_params_n.snapshot());
  p.histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
              m.request_params_max_tokens.snapshot().up_to(max_len));
  p.histogram("vllm:request_num_preemptions",
              "Histogram of the number of preemptions per finished request.",
              m.request_num_preemptions.snapshot());
  p.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.time_to_first_token.snapshot());
  p.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              m.inter_token_latency.snapshot());
  p.histogram("vllm:request_time_per_output_token_seconds",
              "Histogram of time_per_output_token_seconds per request.",
              m.request_time_per_output_token.snapshot());
  p.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              m.e2e_request_latency.snapshot());
  p.histogram("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.",
              m.request_queue_time.snapshot());
  p.histogram("vllm:request_inference_time_seconds",
              "Histogram of time spent in RUNNING phase for request.",
              m.request_inference_time.snapshot());
  p.histogram("vllm:request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.",
              m.request_prefill_time.snapshot());
  p.histogram("vllm:request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.",
              m.request_decode_time.snapshot());
  p.histogram("vllm:request_prefill_kv_computed_tokens",
              "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
              m.request_prefill_kv_computed_tokens.snapshot().up_to(max_len));

  // An info-style gauge (value 1) whose labels are the cache config, as vLLM's
  // CacheConfig.metrics_info() plus engine; no model_name label (as vLLM).
  if (e.cache) {
    const CacheConfig& c = *e.cache;
    // vLLM's KV capacity in tokens and how many max_model_len sequences it holds at once.
    // Hybrid caches (KV cache groups): as vLLM, the tokens every group can hold and the
    // sequences whose window groups hold only their windows.
    const int64_t size_tokens =
        st.kv_cache_size_tokens > 0 ? st.kv_cache_size_tokens : st.num_kv_blocks * c.block_size;
    const double max_concurrency =
        st.kv_cache_max_concurrency > 0 ? st.kv_cache_max_concurrency
        : e.max_model_len > 0           ? static_cast<double>(size_tokens) / e.max_model_len
                                        : 0.0;
    p.header("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    p.raw("vllm:cache_config_info{block_size=\"" + std::to_string(c.block_size) +
          "\",cache_dtype=\"" + escape_label(c.kv_cache_dtype) +
          "\",calculate_kv_scales=\"" + py_bool(c.calculate_kv_scales) +
          "\",enable_prefix_caching=\"" + py_bool(c.enable_prefix_caching) +
          "\",gpu_memory_utilization=\"" + py_float(c.gpu_memory_utilization) +
          "\",kv_cache_max_concurrency=\"" + py_float(max_concurrency) +
          "\",kv_cache_memory_bytes=\"" + py_int_or_none(c.kv_cache_memory_bytes) +
          "\",kv_cache_size_tokens=\"" + std::to_string(size_tokens) +
          "\",num_cpu_blocks=\"None\",num_gpu_blocks=\"" + std::to_string(st.num_kv_blocks) +
          "\",num_gpu_blocks_override=\"" + py_int_or_none(c.num_kv_blocks) +
          "\",engine=\"0\"} 1");
  }
}

void render_octet(Page& p, const EngineMetricsView& e) {
  const EngineStats& st = e.stats;
  p.scalar("octet:kv_cache_num_blocks", "gauge", "Usable KV cache blocks.",
           static_cast<double>(st.num_kv_blocks));
  p.scalar("octet:kv_cache_num_free_blocks", "gauge", "Free KV cache blocks.",
           static_cast<double>(st.num_free_kv_blocks));
  p.scalar("octet:engine_alive", "gauge", "1 while the engine thread runs, 0 once it has died.",
           st.alive ? 1.0 : 0.0);
  p.scalar("octet:num_steps_total", "counter", "Engine steps run.",
           static_cast<double>(st.num_steps));

  const std::vector<KVLayerInfo>& kv_layers = e.kv_layers;
  if (!kv_layers.empty()) {
    p.header("octet:kv_cache_layer_info", "gauge",
             "KV cache dtype, scale source and sliding window of each layer (value 1).");
    for (size_t i = 0; i < kv_layers.size(); ++i) {
      const KVLayerInfo& l = kv_layers[i];
      p.sample("octet:kv_cache_layer_info", 1.0,
               "layer=\"" + std::to_string(i) + "\",dtype=\"" + escape_label(l.dtype) +
                   "\",scale_source=\"" + escape_label(l.scale_source) +
                   "\",sliding_window=\"" + std::to_string(l.sliding_window) + "\"");
    }
    const struct {
      const char* name;
      const char* help;
      std::vector<float> KVLayerInfo::*scales;
    } kinds[] = {{"octet:kv_cache_k_scale", "FP8 K cache scale per layer and KV head.",
                  &KVLayerInfo::k_scale},
                 {"octet:kv_cache_v_scale", "FP8 V cache scale per layer and KV head.",
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
        {"octet:kv_cache_sampled_values_total",
         "K/V values of FP8 static-scale layers read back from the cache by the sampled "
         "clipping check (a few tokens of every N-th engine step).",
         &KVLayerSaturation::k_sampled, &KVLayerSaturation::v_sampled},
        {"octet:kv_cache_saturated_values_total",
         "Sampled K/V values stored at the FP8 format's largest magnitude (448 x scale for "
         "E4M3): clipped, or within half a step of clipping.",
         &KVLayerSaturation::k_saturated, &KVLayerSaturation::v_saturated},
        {"octet:kv_cache_underflow_values_total",
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
}

}  // namespace

std::string render_metrics(const std::string& model_name, const EngineMetricsView& engine,
                           const ServerMetrics& metrics) {
  Page p(model_name);
  render_vllm(p, engine, metrics);
  render_octet(p, engine);
  return p.str();
}

}  // namespace octet::server
