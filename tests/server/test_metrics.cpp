// /metrics text: Prometheus exposition format 0.0.4 with vLLM's metric names under `octet:`,
// histogram bucket arithmetic and per-layer KV gauges, checked line by line against
// hand-written expected text.
#include <catch2/catch.hpp>

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

}  // namespace

TEST_CASE("histogram buckets are cumulative and le-inclusive", "[server][metrics]") {
  Histogram h({0.1, 0.5, 1.0});
  for (double v : {0.05, 0.1, 0.3, 0.7, 2.0}) h.observe(v);
  const auto s = h.snapshot();
  CHECK(s.cumulative_counts == std::vector<int64_t>{2, 3, 4});  // 0.1 falls in le="0.1"
  CHECK(s.count == 5);
  CHECK(s.sum == Approx(3.15).epsilon(1e-12));
}

TEST_CASE("sample values format as Prometheus expects", "[server][metrics]") {
  CHECK(format_value(3.0) == "3");
  CHECK(format_value(0.25) == "0.25");
  CHECK(format_value(0.1) == "0.1");
  CHECK(format_value(-2.0) == "-2");
  CHECK(format_value(1.0 / 0.0) == "+Inf");
  CHECK(format_float(0.0123f) == "0.0123");
  CHECK(escape_label("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("metrics page: engine gauges, counters, request outcomes", "[server][metrics]") {
  octet::EngineStats st;
  st.num_requests_running = 3;
  st.num_requests_waiting = 1;
  st.kv_cache_usage = 0.25;
  st.num_kv_blocks = 100;
  st.num_free_kv_blocks = 75;
  st.num_preemptions = 2;
  st.prompt_tokens = 120;
  st.generation_tokens = 45;
  st.prefix_cache_queries = 64;
  st.prefix_cache_hits = 32;
  st.num_steps = 9;
  ServerMetrics m;
  m.record_finish("stop");
  m.record_finish("stop");
  m.record_finish("length");
  m.time_to_first_token.observe(0.03);
  const std::string text = render_metrics("smol", st, {}, m);
  INFO(text);
  const char* expected[] = {
      "# HELP octet:num_requests_running Number of requests in model execution batches.",
      "# TYPE octet:num_requests_running gauge",
      "octet:num_requests_running{model_name=\"smol\"} 3",
      "octet:num_requests_waiting{model_name=\"smol\"} 1",
      "octet:kv_cache_usage_perc{model_name=\"smol\"} 0.25",
      "octet:kv_cache_num_blocks{model_name=\"smol\"} 100",
      "octet:kv_cache_num_free_blocks{model_name=\"smol\"} 75",
      "octet:engine_alive{model_name=\"smol\"} 1",
      "# TYPE octet:num_preemptions_total counter",
      "octet:num_preemptions_total{model_name=\"smol\"} 2",
      "octet:prompt_tokens_total{model_name=\"smol\"} 120",
      "octet:generation_tokens_total{model_name=\"smol\"} 45",
      "octet:prefix_cache_queries_total{model_name=\"smol\"} 64",
      "octet:prefix_cache_hits_total{model_name=\"smol\"} 32",
      "# TYPE octet:request_success_total counter",
      "octet:request_success_total{model_name=\"smol\",finished_reason=\"abort\"} 0",
      "octet:request_success_total{model_name=\"smol\",finished_reason=\"length\"} 1",
      "octet:request_success_total{model_name=\"smol\",finished_reason=\"stop\"} 2",
      "# TYPE octet:time_to_first_token_seconds histogram",
      "octet:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.02\"} 0",
      "octet:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.04\"} 1",
      "octet:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"+Inf\"} 1",
      "octet:time_to_first_token_seconds_sum{model_name=\"smol\"} 0.03",
      "octet:time_to_first_token_seconds_count{model_name=\"smol\"} 1",
      "# TYPE octet:inter_token_latency_seconds histogram",
      "octet:inter_token_latency_seconds_count{model_name=\"smol\"} 0",
      "# TYPE octet:e2e_request_latency_seconds histogram",
      "# TYPE octet:request_queue_time_seconds histogram",
      "octet:request_queue_time_seconds_bucket{model_name=\"smol\",le=\"7680\"} 0",
  };
  for (const char* line : expected) {
    INFO(line);
    CHECK(has_line(text, line));
  }
  // No KV layer gauges without layers.
  CHECK(text.find("kv_cache_layer_info") == std::string::npos);
  CHECK(text.back() == '\n');
}

TEST_CASE("per-layer KV dtype and scale gauges", "[server][metrics]") {
  std::vector<octet::KVLayerInfo> layers(2);
  layers[0].dtype = "fp8_e4m3";
  layers[0].k_scale = {0.5f, 0.0123f};
  layers[0].v_scale = {0.25f, 2.0f};
  layers[0].scale_source = "calculated";
  layers[1].dtype = "bf16";
  layers[1].scale_source = "-";
  layers[1].sliding_window = 4096;
  const std::string text = render_metrics("m", octet::EngineStats{}, layers, ServerMetrics{});
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
  octet::EngineStats st;
  st.kv_saturation.resize(2);
  st.kv_saturation[0] = {0, 640, 3, 17, 640, 0, 2};
  st.kv_saturation[1] = {3, 320, 0, 0, 320, 5, 1};
  const std::string text = render_metrics("m", st, {}, ServerMetrics{});
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
  for (const std::string family : {"kv_cache_sampled_values_total",
                                   "kv_cache_saturated_values_total",
                                   "kv_cache_underflow_values_total"}) {
    INFO(family);
    std::istringstream in(text);
    std::string l;
    int help = 0, type = 0, samples = 0;
    while (std::getline(in, l)) {
      if (l.rfind("# HELP octet:" + family + " ", 0) == 0) ++help;
      if (l == "# TYPE octet:" + family + " counter") {
        ++type;
        CHECK(samples == 0);
      }
      if (l.rfind("octet:" + family + "{", 0) == 0) ++samples;
    }
    CHECK(help == 1);
    CHECK(type == 1);
    CHECK(samples == 4);
  }
  // No FP8 static-scale layer: no such family at all.
  const std::string none = render_metrics("m", octet::EngineStats{}, {}, ServerMetrics{});
  CHECK(none.find("kv_cache_saturated_values_total") == std::string::npos);
}
