#include "bench/serve_bench.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/dataset.h"
#include "bench/load_client.h"
#include "models/tokenizer.h"

namespace octet::bench {

namespace {

// The first model of GET /v1/models: (id, root), with clear errors for what is not a server.
std::pair<std::string, std::string> first_model(const ClientOptions& o, const std::string& url) {
  HttpReply r = http_get(o, "/v1/models", 30);
  if (r.status == 401 || r.status == 403)
    throw std::runtime_error(url + " refused GET /v1/models (HTTP " + std::to_string(r.status) +
                             "): pass --api-key");
  const nlohmann::json j = parse_reply_json(r.body);
  if (r.status != 200 || j.is_discarded() || !j.is_object() || !j.contains("data") ||
      !j["data"].is_array())
    throw std::runtime_error(url + " is not an OpenAI-compatible server: GET /v1/models gave HTTP " +
                             std::to_string(r.status) + " without a model list");
  if (j["data"].empty() || !j["data"][0].is_object() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string())
    throw std::runtime_error(url + " serves no model (GET /v1/models is empty)");
  const auto& m = j["data"][0];
  std::string root = m.contains("root") && m["root"].is_string() ? m["root"].get<std::string>() : "";
  return {m["id"].get<std::string>(), root};
}

class ProgressBar {
 public:
  ProgressBar(size_t total, bool enabled) : total_(total), enabled_(enabled && isatty(2)) {}
  void tick() {
    if (!enabled_) return;
    ++done_;
    const int width = 40;
    const int filled = static_cast<int>(width * done_ / std::max<size_t>(total_, 1));
    std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), done_, total_);
    if (done_ == total_) std::fprintf(stderr, "\n");
  }

 private:
  size_t total_, done_ = 0;
  bool enabled_;
};

}  // namespace

ServeBenchResult run_serve_bench(const BenchServeConfig& cfg, std::ostream& log) {
  cfg.validate();
  const std::string url = cfg.effective_base_url();
  ClientOptions o;
  o.base = parse_base_url(url);
  o.endpoint = cfg.endpoint;
  o.api_key = cfg.api_key;
  if (o.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) o.api_key = k;
  o.ignore_eos = cfg.ignore_eos;
  o.temperature = cfg.temperature_value();
  o.request_timeout_s = cfg.request_timeout;

  // The server must answer as an OpenAI server before anything else (a clear error otherwise).
  auto [model_id, model_root] = first_model(o, url);
  o.model = cfg.model.empty() ? model_id : cfg.model;
  std::string tokenizer_path = cfg.tokenizer;
  if (tokenizer_path.empty()) {
    std::error_code ec;
    for (const std::string& p : {o.model, model_root, model_id})
      if (!p.empty() && std::filesystem::exists(p, ec)) {
        tokenizer_path = p;
        break;
      }
    if (tokenizer_path.empty())
      throw std::invalid_argument("the server's model '" + o.model +
                                  "' is not a local path: pass --tokenizer (a GGUF file or a "
                                  "Hugging Face directory)");
  }
  std::unique_ptr<Tokenizer> tok = load_bench_tokenizer(tokenizer_path);

  std::vector<RequestSpec> requests;
  if (cfg.dataset_name == "random") {
    RandomDatasetOptions r;
    r.num_prompts = cfg.num_prompts;
    r.input_len = cfg.random_input_len;
    r.output_len = cfg.random_output_len;
    r.range_ratio = cfg.random_range_ratio;
    r.prefix_len = cfg.random_prefix_len;
    r.seed = static_cast<uint64_t>(cfg.seed);
    requests = random_dataset(*tok, r);
  } else if (cfg.dataset_name == "sharegpt") {
    requests = sharegpt_dataset(cfg.dataset_path, *tok, cfg.num_prompts, cfg.sharegpt_output_len,
                                static_cast<uint64_t>(cfg.seed));
  } else {
    requests = jsonl_dataset(cfg.dataset_path, *tok, cfg.num_prompts, cfg.jsonl_output_len);
  }
  const std::optional<int64_t> limit =
      cfg.max_concurrency > 0 ? std::optional<int64_t>(cfg.max_concurrency) : std::nullopt;

  if (cfg.ready_check_timeout_sec > 0) {
    // vLLM's ready check: the first prompt, retried until it succeeds (a server still loading
    // answers 503).
    log << "Starting initial single prompt test run...\n";
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(cfg.ready_check_timeout_sec);
    for (;;) {
      const RequestRecord r = run_requests(o, {requests.front()}, {0.0}, std::nullopt).front();
      if (r.success) break;
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("initial test run failed after " +
                                 std::to_string(cfg.ready_check_timeout_sec) + " s: " + r.error);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    log << "Initial test run completed.\n";
  }
  if (cfg.num_warmups > 0) {
    log << "Warming up with " << cfg.num_warmups << " requests...\n";
    std::vector<RequestSpec> warm(static_cast<size_t>(cfg.num_warmups), requests.front());
    run_requests(o, warm, std::vector<double>(warm.size(), 0.0), limit);
    log << "Warmup run completed.\n";
  }

  const double rate = cfg.request_rate_value();
  const std::vector<double> arrivals =
      arrival_times(requests.size(), rate, cfg.burstiness, static_cast<uint64_t>(cfg.seed) + 1);
  log << "Starting main benchmark run...\n";
  log << "Traffic request rate: " << cfg.request_rate << "\n";
  log << "Burstiness factor: " << cfg.burstiness
      << (cfg.burstiness == 1.0 ? " (Poisson process)" : " (Gamma distribution)") << "\n";
  log << "Maximum request concurrency: " << (limit ? std::to_string(*limit) : "None") << "\n";
  log.flush();
  ProgressBar bar(requests.size(), !cfg.disable_tqdm);
  const auto t0 = std::chrono::steady_clock::now();
  ServeBenchResult res;
  res.records = run_requests(o, requests, arrivals, limit, [&](size_t) { bar.tick(); });
  const double duration = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<std::pair<std::string, double>> slos = cfg.goodput_slos();
  GoodputSlo slo;
  for (const auto& [k, v] : slos) {
    if (k == "ttft") slo.ttft_ms = v;
    if (k == "tpot") slo.tpot_ms = v;
    if (k == "e2el") slo.e2el_ms = v;
  }
  res.model = o.model;
  res.run.max_concurrency = limit;
  res.run.request_rate = rate;
  res.run.duration_s = duration;
  res.run.percentile_metrics = cfg.percentile_metric_list();
  res.run.percentiles = cfg.metric_percentile_list();
  res.run.goodput = !slo.empty();
  const Tokenizer& t = *tok;
  res.metrics = calculate_metrics(
      res.records, duration, [&t](const std::string& s) { return count_tokens(t, s); },
      res.run.percentiles, slo);
  return res;
}

}  // namespace octet::bench
