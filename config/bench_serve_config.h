#pragma once
// Options of `octet bench serve` (the load generator), with `vllm bench serve`'s flag names and
// defaults, each declared once (name, default, help).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace octet {

struct BenchServeConfig {
  std::string base_url;          // "" = http://HOST:PORT from --host and --port
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  std::string endpoint = "/v1/completions";
  std::string model;             // "" = the first model of GET /v1/models
  std::string tokenizer;         // "" = the server's model when it is a local path
  std::string dataset_name = "random";
  std::string dataset_path;
  int64_t num_prompts = 1000;
  int64_t random_input_len = 1024;
  int64_t random_output_len = 128;
  double random_range_ratio = 0.0;
  int64_t random_prefix_len = 0;
  int64_t sharegpt_output_len = 0;   // 0 = the conversation's own completion length
  int64_t jsonl_output_len = 256;
  int64_t seed = 0;
  std::string request_rate = "inf";  // requests/s, or inf (all at once)
  double burstiness = 1.0;
  int64_t max_concurrency = 0;       // 0 = no limit
  int64_t num_warmups = 0;
  bool ignore_eos = false;
  std::string temperature;           // "" = the server's default
  std::string goodput;               // "ttft:MS tpot:MS e2el:MS" (any subset)
  std::string percentile_metrics = "ttft,tpot,itl";
  std::string metric_percentiles = "99";
  std::string result_json;           // "" = none
  std::string api_key;               // "" = $OPENAI_API_KEY or none
  double request_timeout = 600;      // seconds per request
  double ready_check_timeout_sec = 0;  // > 0: retry the first prompt until it succeeds
  bool disable_tqdm = false;

  template <class Visitor>
  static void visit(BenchServeConfig& c, Visitor&& v) {
    v(c.base_url, "base_url", "server URL, http://HOST:PORT[/PATH] (default: from --host, --port)");
    v(c.host, "host", "server host when --base-url is not given");
    v(c.port, "port", "server port when --base-url is not given");
    v(c.endpoint, "endpoint", "API endpoint: /v1/completions or /v1/chat/completions");
    v(c.model, "model", "model name sent in requests (default: the first of GET /v1/models)");
    v(c.tokenizer, "tokenizer",
      "GGUF file or Hugging Face directory (default: the server's model when it is a local path)");
    v(c.dataset_name, "dataset_name", "random, sharegpt (a ShareGPT JSON file) or jsonl");
    v(c.dataset_path, "dataset_path", "file of the sharegpt or jsonl dataset");
    v(c.num_prompts, "num_prompts", "requests to send");
    v(c.random_input_len, "random_input_len", "prompt tokens per request (random dataset)");
    v(c.random_output_len, "random_output_len", "max_tokens per request (random dataset)");
    v(c.random_range_ratio, "random_range_ratio",
      "lengths uniform in [L(1-r), L(1+r)], r in [0, 1) (random dataset)");
    v(c.random_prefix_len, "random_prefix_len", "random tokens shared by every prompt, before it");
    v(c.sharegpt_output_len, "sharegpt_output_len",
      "max_tokens of sharegpt requests (0 = the conversation's own completion length)");
    v(c.jsonl_output_len, "jsonl_output_len", "max_tokens of jsonl lines without output_tokens");
    v(c.seed, "seed", "seed of the dataset and of the arrival times");
    v(c.request_rate, "request_rate",
      "requests per second, or inf to send all at once (Poisson arrivals, gamma with --burstiness)");
    v(c.burstiness, "burstiness", "gamma shape of the arrival gaps (1 = Poisson)");
    v(c.max_concurrency, "max_concurrency", "requests in flight at most (0 = no limit)");
    v(c.num_warmups, "num_warmups", "requests sent (with the first prompt) before the benchmark");
    v(c.ignore_eos, "ignore_eos", "send ignore_eos so that every request makes max_tokens");
    v(c.temperature, "temperature", "sampling temperature sent in requests (default: the server's)");
    v(c.goodput, "goodput",
      "service-level objectives KEY:MS for goodput, KEY one of ttft, tpot, e2el, e.g. "
      "--goodput ttft:200 tpot:50");
    v(c.percentile_metrics, "percentile_metrics",
      "comma-separated metrics to report percentiles of: ttft, tpot, itl, e2el");
    v(c.metric_percentiles, "metric_percentiles", "comma-separated percentiles, e.g. 50,90,99");
    v(c.result_json, "result_json", "write vLLM's result JSON to this file");
    v(c.api_key, "api_key", "bearer token sent to the server (default: $OPENAI_API_KEY)");
    v(c.request_timeout, "request_timeout", "seconds one request may take before it fails");
    v(c.ready_check_timeout_sec, "ready_check_timeout_sec",
      "seconds to retry the first prompt until the server answers it (0 = no ready check)");
    v(c.disable_tqdm, "disable_tqdm", "no progress bar on stderr");
  }

  /// Throws std::invalid_argument naming the flag for a bad value: a request rate that is not a
  /// positive number or inf, an unknown dataset or endpoint, a dataset file that cannot be read,
  /// non-positive counts or lengths, a range ratio outside [0, 1), a malformed --goodput or
  /// percentile list.
  void validate() const;

  /// --request-rate as a number (infinity for "inf").
  double request_rate_value() const;
  /// --goodput parsed: (metric, ms) pairs.
  std::vector<std::pair<std::string, double>> goodput_slos() const;
  std::vector<std::string> percentile_metric_list() const;
  std::vector<double> metric_percentile_list() const;
  std::optional<double> temperature_value() const;
  /// --base-url, else http://HOST:PORT.
  std::string effective_base_url() const;
};

}  // namespace octet
