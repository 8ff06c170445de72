// /metrics text (Prometheus exposition format 0.0.4). Each vllm: family is checked against
// vLLM's PrometheusStatLogger as written below from vLLM's source (vllm/v1/metrics/loggers.py:
// names, types, label names, bucket lists; not from octet's code); values after a known
// sequence of requests are checked against hand-derived counts and sums; octet's own families
// keep the octet: prefix.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>

#include "server/openai/metrics.h"

using namespace octet::server;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (l == line) return true;
  return false;
}

// One family of the page: its TYPE, and per sample name its label sets ("k=v" pairs).
struct Family {
  std::string type;
  int help_lines = 0, type_lines = 0;
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> samples;
};

std::map<std::string, std::string> parse_labels(const std::string& s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t eq = s.find('=', i);
    const size_t q2 = s.find('"', eq + 2);
    out[s.substr(i, eq - i)] = s.substr(eq + 2, q2 - eq - 2);
    i = q2 + 2;  // past `",`
  }
  return out;
}

std::map<std::string, Family> parse_page(const std::string& text) {
  std::map<std::string, Family> families;
  std::istringstream in(text);
  std::string l, current;
  while (std::getline(in, l)) {
    if (l.rfind("# HELP ", 0) == 0) {
      current = l.substr(7, l.find(' ', 7) - 7);
      ++families[current].help_lines;
    } else if (l.rfind("# TYPE ", 0) == 0) {
      const size_t sp = l.find(' ', 7);
      REQUIRE(l.substr(7, sp - 7) == current);  // TYPE right after its HELP
      families[current].type = l.substr(sp + 1);
      ++families[current].type_lines;
    } else {
      const size_t brace = l.find('{');
      REQUIRE(brace != std::string::npos);
      const std::string name = l.substr(0, brace);
      REQUIRE(name.rfind(current, 0) == 0);  // samples follow their family's header
      families[current].samples.emplace_back(
          name, parse_labels(l.substr(brace + 1, l.rfind('}') - brace - 1)));
    }
  }
  return families;
}

// vLLM's families octet serves, from vllm/v1/metrics/loggers.py (PrometheusStatLogger):
// labelnames = ["model_name", "engine"] plus the extra ones; counters are exposed with
// `_total` (prometheus_client). Buckets as le strings (prometheus_client's floatToGoString).
struct VllmFamily {
  const char* name;
  const char* type;
  std::set<std::string> labels;  // of every sample, le excluded
  std::vector<std::string> buckets;
};

const std::vector<std::string> kTtft = {
    "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75",
    "1.0",   "2.5",   "5.0",  "7.5",  "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0"};
const std::vector<std::string> kItl = {"0.01", "0.025", "0.05", "0.075", "0.1",  "0.15", "0.2",
                                       "0.3",  "0.4",   "0.5",  "0.75",  "1.0",  "2.5",  "5.0",
                                       "7.5",  "10.0",  "20.0", "40.0",  "80.0"};
const std::vector<std::string> kLatency = {
    "0.3",  "0.5",  "0.8",  "1.0",  "1.5",   "2.0",   "2.5",   "5.0",   "10.0",   "15.0",  "20.0",
    "30.0", "40.0", "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0"};
// build_1_2_5_buckets(max_model_len = 2048).
const std::vector<std::string> k125To2048 = {"1.0",   "2.0",   "5.0",   "10.0",  "20.0",
                                             "50.0",  "100.0", "200.0", "500.0", "1000.0",
                                             "2000.0"};
const std::vector<std::string> kIterationTokens = {
    "1.0", "8.0", "16.0", "32.0", "64.0", "128.0", "256.0", "512.0", "1024.0", "2048.0",
    "4096.0", "8192.0", "16384.0"};

const std::set<std::string> kBase = {"model_name", "engine"};

std::vector<VllmFamily> vllm_families() {
  return {
      {"vllm:num_requests_running", "gauge", kBase, {}},
      {"vllm:num_requests_waiting", "gauge", kBase, {}},
      {"vllm:num_requests_waiting_by_reason", "gauge", {"model_name", "engine", "reason"}, {}},
      {"vllm:kv_cache_usage_perc", "gauge", kBase, {}},
      {"vllm:prefix_cache_queries_total", "counter", kBase, {}},
      {"vllm:prefix_cache_hits_total", "counter", kBase, {}},
      {"vllm:num_preemptions_total", "counter", kBase, {}},
      {"vllm:prompt_tokens_total", "counter", kBase, {}},
      {"vllm:generation_tokens_total", "counter", kBase, {}},
      {"vllm:request_success_total", "counter", {"model_name", "engine", "finished_reason"}, {}},
      {"vllm:request_prompt_tokens", "histogram", kBase, k125To2048},
      {"vllm:request_generation_tokens", "histogram", kBase, k125To2048},
      {"vllm:iteration_tokens_total", "histogram", kBase, kIterationTokens},
      {"vllm:request_params_n", "histogram", kBase, {"1.0", "2.0", "5.0", "10.0", "20.0"}},
      {"vllm:request_params_max_tokens", "histogram", kBase, k125To2048},
      {"vllm:request_num_preemptions",
       "histogram",
       kBase,
       {"1.0", "2.0", "3.0", "4.0", "5.0", "10.0", "20.0"}},
      {"vllm:time_to_first_token_seconds", "histogram", kBase, kTtft},
      {"vllm:inter_token_latency_seconds", "histogram", kBase, kItl},
      // vLLM 0.34: the inter-token-latency buckets (tests/v1/metrics/test_histogram_buckets.py).
      {"vllm:request_time_per_output_token_seconds", "histogram", kBase, kItl},
      // Admission is the API server's: no engine label (tests/v1/engine/test_admission_control.py).
      {"vllm:admission_rejections_total", "counter", {"model_name", "reason"}, {}},
      {"vllm:e2e_request_latency_seconds", "histogram", kBase, kLatency},
      {"vllm:request_queue_time_seconds", "histogram", kBase, kLatency},
      {"vllm:request_inference_time_seconds", "histogram", kBase, kLatency},
      {"vllm:request_prefill_time_seconds", "histogram", kBase, kLatency},
      {"vllm:request_decode_time_seconds", "histogram", kBase, kLatency},
      {"vllm:request_prefill_kv_computed_tokens", "histogram", kBase, k125To2048},
      // CacheConfig.metrics_info() keys (the ones octet has) + engine; no model_name.
      // kv_cache_size_tokens and kv_cache_max_concurrency: vLLM 0.34's test_metrics_exist.
      {"vllm:cache_config_info",
       "gauge",
       {"block_size", "cache_dtype", "calculate_kv_scales", "enable_prefix_caching",
        "gpu_memory_utilization", "kv_cache_max_concurrency", "kv_cache_memory_bytes",
        "kv_cache_size_tokens", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
        "engine"},
       {}},
  };
}

EngineMetricsView running_engine() {
  EngineMetricsView e;
  e.max_model_len = 2048;
  e.cache = octet::CacheConfig{};
  e.stats.num_kv_blocks = 100;
  return e;
}

// The value of the sample line `name{labels}` (labels exactly as written on the page).
double value_of(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (l.rfind(series + " ", 0) == 0) return std::stod(l.substr(series.size() + 1));
  FAIL("no series " << series);
  return 0;
}

}  // namespace

TEST_CASE("histogram buckets are cumulative and le-inclusive", "[server][metrics]") {
  Histogram h({0.1, 0.5, 1.0});
  for (double v : {0.05, 0.1, 0.3, 0.7, 2.0}) h.observe(v);
  const auto s = h.snapshot();
  CHECK(s.cumulative_counts == std::vector<int64_t>{2, 3, 4});  // 0.1 falls in le="0.1"
  CHECK(s.count == 5);
  CHECK(s.sum == Approx(3.15).epsilon(1e-12));
  const auto cut = s.up_to(0.5);
  CHECK(cut.upper_bounds == std::vector<double>{0.1, 0.5});
  CHECK(cut.cumulative_counts == std::vector<int64_t>{2, 3});
  CHECK(cut.count == 5);
}

TEST_CASE("sample values and bounds format as Prometheus and prometheus_client do",
          "[server][metrics]") {
  CHECK(format_value(3.0) == "3");
  CHECK(format_value(0.25) == "0.25");
  CHECK(format_value(0.1) == "0.1");
  CHECK(format_value(-2.0) == "-2");
  CHECK(format_value(1.0 / 0.0) == "+Inf");
  // floatToGoString: repr(float), exponent form from 7 integer digits.
  CHECK(format_le(1.0) == "1.0");
  CHECK(format_le(0.001) == "0.001");
  CHECK(format_le(0.075) == "0.075");
  CHECK(format_le(2560.0) == "2560.0");
  CHECK(format_le(500000.0) == "500000.0");
  CHECK(format_le(1000000.0) == "1e+06");
  CHECK(format_le(2000000.0) == "2e+06");
  CHECK(format_le(1.0 / 0.0) == "+Inf");
  CHECK(format_float(0.0123f) == "0.0123");
  CHECK(escape_label("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  // vLLM's build_1_2_5_buckets(100) docstring example.
  CHECK(one_two_five_buckets(100) == std::vector<double>{1, 2, 5, 10, 20, 50, 100});
}

TEST_CASE("every vllm: family has vLLM's name, type, labels and buckets", "[server][metrics]") {
  const std::string text = render_metrics("smol", running_engine(), ServerMetrics{});
  INFO(text);
  const auto families = parse_page(text);
  for (const VllmFamily& want : vllm_families()) {
    INFO(want.name);
    REQUIRE(families.count(want.name) == 1);
    const Family& f = families.at(want.name);
    CHECK(f.help_lines == 1);
    CHECK(f.type_lines == 1);
    CHECK(f.type == want.type);
    REQUIRE(!f.samples.empty());
    std::vector<std::string> les;
    for (const auto& [name, labels] : f.samples) {
      INFO(name);
      std::set<std::string> keys;
      for (const auto& [k, v] : labels)
        if (k != "le") keys.insert(k);
      CHECK(keys == want.labels);
      if (labels.count("engine")) CHECK(labels.at("engine") == "0");
      if (labels.count("model_name")) CHECK(labels.at("model_name") == "smol");
      if (name == std::string(want.name) + "_bucket") les.push_back(labels.at("le"));
    }
    if (f.type == "histogram") {
      std::vector<std::string> want_les = want.buckets;
      want_les.push_back("+Inf");
      CHECK(les == want_les);
    }
  }
  // Nothing else under vllm:, and none of vLLM's families under the old octet: names.
  for (const auto& [name, f] : families) {
    if (name.rfind("vllm:", 0) != 0) continue;
    bool known = false;
    for (const VllmFamily& want : vllm_families()) known = known || name == want.name;
    CHECK(known);
  }
  for (const char* gone :
       {"octet:num_requests_running", "octet:num_requests_waiting", "octet:kv_cache_usage_perc",
        "octet:num_preemptions_total", "octet:prompt_tokens_total",
        "octet:generation_tokens_total", "octet:prefix_cache_queries_total",
        "octet:prefix_cache_hits_total", "octet:request_success_total",
        "octet:time_to_first_token_seconds", "octet:inter_token_latency_seconds",
        "octet:e2e_request_latency_seconds", "octet:request_queue_time_seconds"})
    CHECK(text.find(gone) == std::string::npos);
  // octet's own families: octet: prefix, model_name only.
  for (const char* own : {"octet:kv_cache_num_blocks", "octet:kv_cache_num_free_blocks",
                          "octet:engine_alive", "octet:num_steps_total"}) {
    INFO(own);
    REQUIRE(families.count(own) == 1);
    CHECK(families.at(own).samples.at(0).second ==
          std::map<std::string, std::string>{{"model_name", "smol"}});
  }
  // No LoRA in octet: vLLM emits vllm:lora_requests_info only with a LoRA config.
  CHECK(text.find("lora_requests_info") == std::string::npos);
}

TEST_CASE("metrics page: engine gauges and counters", "[server][metrics]") {
  EngineMetricsView e = running_engine();
  octet::EngineStats& st = e.stats;
  st.num_requests_running = 3;
  st.num_requests_waiting = 4;
  st.kv_cache_usage = 0.25;
  st.num_kv_blocks = 100;
  st.num_free_kv_blocks = 75;
  st.num_preemptions = 2;
  st.prompt_tokens = 120;
  st.generation_tokens = 45;
  st.prefix_cache_queries = 64;
  st.prefix_cache_hits = 32;
  st.num_steps = 9;
  e.cache->block_size = 32;
  e.cache->kv_cache_dtype = "fp8_e4m3";
  e.cache->gpu_memory_utilization = 0.9;
  e.cache->enable_prefix_caching = false;
  e.cache->num_kv_blocks = 100;
  const std::string text = render_metrics("smol", e, ServerMetrics{});
  INFO(text);
  const std::string L = "{model_name=\"smol\",engine=\"0\"}";
  for (const std::string& line : std::vector<std::string>{
           "# HELP vllm:num_requests_running Number of requests in model execution batches.",
           "# TYPE vllm:num_requests_running gauge",
           "vllm:num_requests_running" + L + " 3",
           "vllm:num_requests_waiting" + L + " 4",
           "vllm:num_requests_waiting_by_reason{model_name=\"smol\",engine=\"0\","
           "reason=\"capacity\"} 4",
           "vllm:num_requests_waiting_by_reason{model_name=\"smol\",engine=\"0\","
           "reason=\"deferred\"} 0",
           "vllm:kv_cache_usage_perc" + L + " 0.25",
           "# TYPE vllm:num_preemptions_total counter",
           "vllm:num_preemptions_total" + L + " 2",
           "vllm:prompt_tokens_total" + L + " 120",
           "vllm:generation_tokens_total" + L + " 45",
           "vllm:prefix_cache_queries_total" + L + " 64",
           "vllm:prefix_cache_hits_total" + L + " 32",
           "# TYPE vllm:admission_rejections_total counter",
           "vllm:admission_rejections_total{model_name=\"smol\",reason=\"max_num_queued_reqs\"} 0",
           "vllm:admission_rejections_total{model_name=\"smol\",reason=\"max_num_queued_tokens\"} 0",
           "vllm:request_success_total{model_name=\"smol\",engine=\"0\","
           "finished_reason=\"abort\"} 0",
           "vllm:request_success_total{model_name=\"smol\",engine=\"0\","
           "finished_reason=\"error\"} 0",
           "vllm:request_success_total{model_name=\"smol\",engine=\"0\","
           "finished_reason=\"repetition\"} 0",
           "vllm:cache_config_info{block_size=\"32\",cache_dtype=\"fp8_e4m3\","
           "calculate_kv_scales=\"False\",enable_prefix_caching=\"False\","
           "gpu_memory_utilization=\"0.9\",kv_cache_max_concurrency=\"1.5625\","
           "kv_cache_memory_bytes=\"None\",kv_cache_size_tokens=\"3200\",num_cpu_blocks=\"None\","
           "num_gpu_blocks=\"100\",num_gpu_blocks_override=\"100\",engine=\"0\"} 1",
           "octet:kv_cache_num_blocks{model_name=\"smol\"} 100",
           "octet:kv_cache_num_free_blocks{model_name=\"smol\"} 75",
           "octet:engine_alive{model_name=\"smol\"} 1",
           "octet:num_steps_total{model_name=\"smol\"} 9",
       }) {
    INFO(line);
    CHECK(has_line(text, line));
  }
  // No KV layer gauges without layers; no cache_config_info while the model loads.
  CHECK(text.find("kv_cache_layer_info") == std::string::npos);
  CHECK(text.back() == '\n');
  const std::string loading = render_metrics("smol", EngineMetricsView{}, ServerMetrics{});
  CHECK(loading.find("vllm:cache_config_info") == std::string::npos);
  CHECK(has_line(loading, "vllm:request_prompt_tokens_bucket{model_name=\"smol\",engine=\"0\","
                          "le=\"+Inf\"} 0"));
}

TEST_CASE("per-request histograms after a known sequence of requests", "[server][metrics]") {
  ServerMetrics m;
  // A: arrived, queued 0.1 s, first token at 0.4 s, finished at 1.4 s; 30 prompt tokens,
  //    20 generated, max_tokens 20 (length), preempted once.
  octet::RequestOutput a;
  a.finished = true;
  a.finish_reason = "length";
  a.num_prompt_tokens = 30;
  a.num_generated_tokens = 20;
  a.queue_time_s = 0.1;
  a.first_token_time_s = 0.4;
  a.e2e_time_s = 1.4;
  a.num_preemptions = 1;
  a.max_tokens = 20;
  a.num_cached_tokens = 16;  // 14 computed
  // B: stop after 3 tokens; queued 0.5 s, first token at 0.7 s, done at 0.9 s; 7 prompt
  //    tokens, max_tokens 1500, never preempted.
  octet::RequestOutput b = a;
  b.finish_reason = "stop";
  b.num_prompt_tokens = 7;
  b.num_generated_tokens = 3;
  b.queue_time_s = 0.5;
  b.first_token_time_s = 0.7;
  b.e2e_time_s = 0.9;
  b.num_preemptions = 0;
  b.max_tokens = 1500;
  b.num_cached_tokens = 0;  // 7 computed
  // C: the engine failed it before any token (error): 12 prompt tokens, queued 0.2 s, e2e 0.3.
  octet::RequestOutput c;
  c.finished = true;
  c.finish_reason = "abort";
  c.error = "boom";
  c.num_prompt_tokens = 12;
  c.queue_time_s = 0.2;
  c.e2e_time_s = 0.3;
  c.max_tokens = 64;
  for (const auto* o : {&a, &b, &c}) m.record_finished_request(*o);
  m.record_finish("abort");  // a client abort
  m.record_admission_rejection();  // two requests refused with 503 (--max-num-waiting)
  m.record_admission_rejection();
  m.request_params_n.observe(1);
  m.request_params_n.observe(3);

  EngineMetricsView e = running_engine();
  // Steps of 1, 1, 7, 8, 9 and 20000 tokens: power-of-two bins 2^0 x2, 2^3 x2, 2^4, 2^15.
  e.stats.step_tokens_log2[0] = 2;
  e.stats.step_tokens_log2[3] = 2;
  e.stats.step_tokens_log2[4] = 1;
  e.stats.step_tokens_log2[15] = 1;
  e.stats.step_tokens_sum = 1 + 1 + 7 + 8 + 9 + 20000;
  const std::string text = render_metrics("m", e, m);
  INFO(text);
  const auto v = [&](const std::string& name, const std::string& extra = "") {
    return value_of(text, name + "{model_name=\"m\",engine=\"0\"" + extra + "}");
  };
  const auto le = [&](const std::string& name, const char* bound) {
    return v(name + "_bucket", std::string(",le=\"") + bound + "\"");
  };
  CHECK(v("vllm:request_success_total", ",finished_reason=\"length\"") == 1);
  CHECK(v("vllm:request_success_total", ",finished_reason=\"stop\"") == 1);
  CHECK(v("vllm:request_success_total", ",finished_reason=\"error\"") == 1);
  CHECK(v("vllm:request_success_total", ",finished_reason=\"abort\"") == 1);

  // Every finished engine request: e2e and queue time.
  CHECK(v("vllm:e2e_request_latency_seconds_count") == 3);
  CHECK(v("vllm:e2e_request_latency_seconds_sum") == Approx(1.4 + 0.9 + 0.3));
  CHECK(le("vllm:e2e_request_latency_seconds", "0.3") == 1);
  CHECK(le("vllm:e2e_request_latency_seconds", "1.0") == 2);
  CHECK(le("vllm:e2e_request_latency_seconds", "1.5") == 3);
  CHECK(v("vllm:request_queue_time_seconds_count") == 3);
  CHECK(v("vllm:request_queue_time_seconds_sum") == Approx(0.1 + 0.5 + 0.2));
  // A and B produced tokens: TTFT, prefill (0.3, 0.2), decode (1.0, 0.2), inference (1.3, 0.4).
  CHECK(v("vllm:time_to_first_token_seconds_count") == 2);
  CHECK(v("vllm:time_to_first_token_seconds_sum") == Approx(0.4 + 0.7));
  CHECK(v("vllm:request_prefill_time_seconds_count") == 2);
  CHECK(v("vllm:request_prefill_time_seconds_sum") == Approx(0.3 + 0.2));
  CHECK(v("vllm:request_decode_time_seconds_sum") == Approx(1.0 + 0.2));
  CHECK(le("vllm:request_decode_time_seconds", "0.3") == 1);
  CHECK(le("vllm:request_decode_time_seconds", "1.0") == 2);
  CHECK(v("vllm:request_inference_time_seconds_sum") == Approx(1.3 + 0.4));
  CHECK(le("vllm:request_inference_time_seconds", "0.5") == 1);
  CHECK(le("vllm:request_inference_time_seconds", "1.5") == 2);
  // Time per output token, every request: A 1.0 s / 19, B 0.2 s / 2, C 0 (no token).
  CHECK(v("vllm:request_time_per_output_token_seconds_count") == 3);
  CHECK(v("vllm:request_time_per_output_token_seconds_sum") == Approx(1.0 / 19 + 0.1));
  CHECK(le("vllm:request_time_per_output_token_seconds", "0.01") == 1);
  CHECK(le("vllm:request_time_per_output_token_seconds", "0.05") == 1);
  CHECK(le("vllm:request_time_per_output_token_seconds", "0.075") == 2);
  CHECK(le("vllm:request_time_per_output_token_seconds", "0.15") == 3);
  CHECK(value_of(text, "vllm:admission_rejections_total{model_name=\"m\","
                       "reason=\"max_num_queued_reqs\"}") == 2);
  CHECK(value_of(text, "vllm:admission_rejections_total{model_name=\"m\","
                       "reason=\"max_num_queued_tokens\"}") == 0);
  // Token counts: prompts 30, 7, 12; generated 20, 3, 0.
  CHECK(v("vllm:request_prompt_tokens_count") == 3);
  CHECK(v("vllm:request_prompt_tokens_sum") == 49);
  CHECK(le("vllm:request_prompt_tokens", "10.0") == 1);
  CHECK(le("vllm:request_prompt_tokens", "20.0") == 2);
  CHECK(le("vllm:request_prompt_tokens", "50.0") == 3);
  CHECK(v("vllm:request_generation_tokens_sum") == 23);
  CHECK(le("vllm:request_generation_tokens", "1.0") == 1);  // C's 0
  CHECK(le("vllm:request_generation_tokens", "5.0") == 2);
  // Prompt tokens computed (not from the prefix cache): 14, 7, 12.
  CHECK(v("vllm:request_prefill_kv_computed_tokens_sum") == 33);
  CHECK(le("vllm:request_prefill_kv_computed_tokens", "10.0") == 1);
  CHECK(le("vllm:request_prefill_kv_computed_tokens", "20.0") == 3);
  // max_tokens 20, 1500, 64.
  CHECK(v("vllm:request_params_max_tokens_count") == 3);
  CHECK(v("vllm:request_params_max_tokens_sum") == 1584);
  CHECK(le("vllm:request_params_max_tokens", "1000.0") == 2);
  CHECK(le("vllm:request_params_max_tokens", "2000.0") == 3);
  // Preemptions 1, 0, 0: all three <= 1.
  CHECK(le("vllm:request_num_preemptions", "1.0") == 3);
  CHECK(v("vllm:request_num_preemptions_sum") == 1);
  // n = 1 and 3.
  CHECK(le("vllm:request_params_n", "1.0") == 1);
  CHECK(le("vllm:request_params_n", "2.0") == 1);
  CHECK(le("vllm:request_params_n", "5.0") == 2);
  CHECK(v("vllm:request_params_n_sum") == 4);
  // Iteration tokens 1, 1, 7, 8, 9, 20000 against 1, 8, 16, ..., 16384.
  CHECK(le("vllm:iteration_tokens_total", "1.0") == 2);
  CHECK(le("vllm:iteration_tokens_total", "8.0") == 4);
  CHECK(le("vllm:iteration_tokens_total", "16.0") == 5);
  CHECK(le("vllm:iteration_tokens_total", "16384.0") == 5);
  CHECK(le("vllm:iteration_tokens_total", "+Inf") == 6);
  CHECK(v("vllm:iteration_tokens_total_count") == 6);
  CHECK(v("vllm:iteration_tokens_total_sum") == 20026);
}

TEST_CASE("per-layer KV dtype and scale gauges", "[server][metrics]") {
  EngineMetricsView e;
  e.kv_layers.resize(2);
  e.kv_layers[0].dtype = "fp8_e4m3";
  e.kv_layers[0].k_scale = {0.5f, 0.0123f};
  e.kv_layers[0].v_scale = {0.25f, 2.0f};
  e.kv_layers[0].scale_source = "calculated";
  e.kv_layers[1].dtype = "bf16";
  e.kv_layers[1].scale_source = "-";
  e.kv_layers[1].sliding_window = 4096;
  const std::string text = render_metrics("m", e, ServerMetrics{});
  INFO(text);
  for (const char* line : {
           "# TYPE octet:kv_cache_layer_info gauge",
           "octet:kv_cache_layer_info{model_name=\"m\",layer=\"0\",dtype=\"fp8_e4m3\","
           "scale_source=\"calculated\",sliding_window=\"0\"} 1",
           "octet:kv_cache_layer_info{model_name=\"m\",layer=\"1\",dtype=\"bf16\","
           "scale_source=\"-\",sliding_window=\"4096\"} 1",
           "# TYPE octet:kv_cache_k_scale gauge",
           "octet:kv_cache_k_scale{model_name=\"m\",layer=\"0\",kv_head=\"0\"} 0.5",
           "octet:kv_cache_k_scale{model_name=\"m\",layer=\"0\",kv_head=\"1\"} 0.0123",
           "octet:kv_cache_v_scale{model_name=\"m\",layer=\"0\",kv_head=\"1\"} 2",
       }) {
    INFO(line);
    CHECK(has_line(text, line));
  }
  CHECK(text.find("layer=\"1\",kv_head") == std::string::npos);  // bf16 layer: no scales
}

TEST_CASE("per-layer sampled FP8 clipping counters", "[server][metrics]") {
  EngineMetricsView e;
  e.stats.kv_saturation.resize(2);
  e.stats.kv_saturation[0] = {0, 640, 3, 17, 640, 0, 2};
  e.stats.kv_saturation[1] = {3, 320, 0, 0, 320, 5, 1};
  const std::string text = render_metrics("m", e, ServerMetrics{});
  INFO(text);
  for (const char* line : {
           "# TYPE octet:kv_cache_sampled_values_total counter",
           "octet:kv_cache_sampled_values_total{model_name=\"m\",layer=\"0\",tensor=\"k\"} 640",
           "octet:kv_cache_sampled_values_total{model_name=\"m\",layer=\"3\",tensor=\"v\"} 320",
           "# TYPE octet:kv_cache_saturated_values_total counter",
           "octet:kv_cache_saturated_values_total{model_name=\"m\",layer=\"0\",tensor=\"k\"} 3",
           "octet:kv_cache_saturated_values_total{model_name=\"m\",layer=\"0\",tensor=\"v\"} 0",
           "octet:kv_cache_saturated_values_total{model_name=\"m\",layer=\"3\",tensor=\"v\"} 5",
           "# TYPE octet:kv_cache_underflow_values_total counter",
           "octet:kv_cache_underflow_values_total{model_name=\"m\",layer=\"0\",tensor=\"k\"} 17",
           "octet:kv_cache_underflow_values_total{model_name=\"m\",layer=\"0\",tensor=\"v\"} 2",
           "octet:kv_cache_underflow_values_total{model_name=\"m\",layer=\"3\",tensor=\"k\"} 0",
           "octet:kv_cache_underflow_values_total{model_name=\"m\",layer=\"3\",tensor=\"v\"} 1",
       }) {
    INFO(line);
    CHECK(has_line(text, line));
  }
  // Valid exposition: each family's HELP and TYPE once, before its samples; 4 samples each.
  const auto families = parse_page(text);
  for (const std::string family : {"octet:kv_cache_sampled_values_total",
                                   "octet:kv_cache_saturated_values_total",
                                   "octet:kv_cache_underflow_values_total"}) {
    INFO(family);
    REQUIRE(families.count(family) == 1);
    CHECK(families.at(family).help_lines == 1);
    CHECK(families.at(family).type_lines == 1);
    CHECK(families.at(family).samples.size() == 4);
  }
  // No FP8 static-scale layer: no such family at all.
  const std::string none = render_metrics("m", EngineMetricsView{}, ServerMetrics{});
  CHECK(none.find("kv_cache_saturated_values_total") == std::string::npos);
}
