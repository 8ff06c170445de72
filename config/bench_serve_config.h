#pragma once
// Options of `octet bench serve` (the load generator), with `vllm bench serve`'s flag names and
// defaults, each declared once (name, default, help).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace octet {

struct BenchServeConfig {
  // Bounds of the options (usage errors beyond): no value makes the client allocate or wait
  // without limit, and every wait converts to a clock duration without overflow.
  static constexpr double kMinRequestRate = 1e-6;           // requests/s (one per 11.6 days)
  static constexpr double kMaxSeconds = 365.0 * 24 * 3600;  // timeouts: a year at most
  static constexpr int64_t kMaxNumPrompts = 10'000'000;     // --num-prompts, --num-warmups
  static constexpr int64_t kMaxLenTokens = int64_t{1} << 24;  // every length flag, tokens

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
      "requests per second (at least 1e-6), or inf to send all at once (Poisson arrivals, gamma "
      "with --burstiness)");
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
    v(c.request_timeout, "request_timeout",
      "seconds one request may take, connect to the end of its stream, before it fails");
    v(c.ready_check_timeout_sec, "ready_check_timeout_sec",
      "seconds to retry the first prompt until the server answers it (0 = no ready check)");
    v(c.disable_tqdm, "disable_tqdm", "no progress bar on stderr");
  }

  /// Throws std::invalid_argument naming the flag for a bad value: a request rate that is not a
  /// number in [kMinRequestRate, inf], a burstiness or timeout that is not a positive finite
  /// number (timeouts at most kMaxSeconds), an unknown dataset or endpoint, a dataset path that
  /// is not a readable file (checked without opening it, so a FIFO cannot block), counts or
  /// lengths outside their bounds, a range ratio outside [0, 1), a malformed --goodput or
  /// percentile list.
  void validate() const;

  /// --request-rate as a number (infinity for "inf"); throws std::invalid_argument as validate().
  double request_rate_value() const;
  /// --goodput parsed: (metric, ms) pairs.
  std::vector<std::pair<std::string, double>> goodput_slos() const;
  std::vector<std::string> percentile_metric_list() const;
  std::vector<double> metric_percentile_list() const;
  std::optional<double> temperature_value() const;
  /// --base-url, else http://HOST:PORT.
  std::string effective_base_url() const;
};

/// Options of `octet bench sweep`: bench serve over a grid, `octet serve` started and stopped per
/// server configuration when --model is given.
struct BenchSweepConfig {
  std::string model;               // start `octet serve --model` per configuration
  std::string base_url;            // or benchmark a running server (no server grid then)
  std::string max_concurrency = "1,4,16";
  std::string random_input_len = "128";
  std::string random_output_len = "64";
  std::string kv_cache_dtype;      // comma list, e.g. bf16,fp8_e4m3 ("" = the server's default)
  std::string serve_grid;          // "max-num-seqs=8,16;enable-prefix-caching=true"
  std::string serve_args;          // extra `octet serve` flags, space-separated, every run
  std::string tokenizer;           // "" = --model
  std::string endpoint = "/v1/completions";
  int64_t num_prompts = 0;         // 0 = max(8, 4 x concurrency) per point
  bool ignore_eos = true;
  int64_t seed = 0;
  std::string output_dir = "sweep_results";
  double server_start_timeout = 300;  // seconds for `octet serve` to get ready

  template <class Visitor>
  static void visit(BenchSweepConfig& c, Visitor&& v) {
    v(c.model, "model", "model to start `octet serve` with for each server configuration");
    v(c.base_url, "base_url", "benchmark this running server instead (no --kv-cache-dtype or "
                              "--serve-grid then)");
    v(c.max_concurrency, "max_concurrency", "comma-separated concurrencies");
    v(c.random_input_len, "random_input_len", "comma-separated prompt lengths (tokens)");
    v(c.random_output_len, "random_output_len", "comma-separated output lengths (tokens)");
    v(c.kv_cache_dtype, "kv_cache_dtype", "comma-separated kv_cache_dtype values of the server");
    v(c.serve_grid, "serve_grid",
      "more server axes: FLAG=v1,v2;FLAG2=v3 (any `octet serve` flag, without --)");
    v(c.serve_args, "serve_args", "extra `octet serve` flags for every configuration");
    v(c.tokenizer, "tokenizer", "tokenizer of the prompts (default: --model)");
    v(c.endpoint, "endpoint", "/v1/completions or /v1/chat/completions");
    v(c.num_prompts, "num_prompts", "requests per point (0 = max(8, 4 x concurrency))");
    v(c.ignore_eos, "ignore_eos", "every request makes its full output length");
    v(c.seed, "seed", "seed of the prompts");
    v(c.output_dir, "output_dir", "directory of results.csv, the plots and the server logs");
    v(c.server_start_timeout, "server_start_timeout", "seconds `octet serve` may take to start");
  }

  /// Throws std::invalid_argument for neither or both of --model and --base-url, a server grid
  /// without --model, a --server-start-timeout that is not in (0, a year], or an --output-dir
  /// holding a line break (it is written into the gnuplot script).
  void validate() const;
};

}  // namespace octet
