#include "config/bench_serve_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace octet {

namespace {

std::vector<std::string> split_any(const std::string& s, const std::string& seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (seps.find(ch) != std::string::npos) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

double parse_number(const std::string& s, const std::string& flag) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + ": '" + s + "' is not a number");
}

// A readable file or device, checked without opening it (opening a FIFO blocks until a writer
// comes). Throws std::invalid_argument naming the flag.
void check_readable_file(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0)
    throw std::invalid_argument(flag + " '" + path + "' cannot be read: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    throw std::invalid_argument(flag + " '" + path + "' is a directory, expected a file");
}

// A timeout in seconds: positive, finite, at most kMaxSeconds (or >= 0 when zero_ok).
void check_seconds(double v, const std::string& flag, bool zero_ok) {
  if (!(zero_ok ? v >= 0 : v > 0) || !(v <= BenchServeConfig::kMaxSeconds))
    throw std::invalid_argument(flag + " must be " + (zero_ok ? "in [0, " : "in (0, ") +
                                std::to_string(static_cast<int64_t>(BenchServeConfig::kMaxSeconds)) +
                                "] seconds");
}

}  // namespace

double BenchServeConfig::request_rate_value() const {
  if (request_rate == "inf" || request_rate == "Inf" || request_rate == "infinity")
    return INFINITY;
  const double v = parse_number(request_rate, "--request-rate");
  // Positive and finite; "inf" (above) is the only infinite rate. Below kMinRequestRate the
  // arrival schedule would run for years (and 1e-300 overflowed the timer's duration).
  if (!(v > 0) || !std::isfinite(v))
    throw std::invalid_argument("--request-rate must be a positive number of requests per second "
                                "or inf, got " + request_rate);
  if (v < kMinRequestRate)
    throw std::invalid_argument("--request-rate must be at least 1e-06 requests per second (or "
                                "inf), got " + request_rate);
  return v;
}

std::vector<std::pair<std::string, double>> BenchServeConfig::goodput_slos() const {
  std::vector<std::pair<std::string, double>> out;
  for (const std::string& item : split_any(goodput, " ,")) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("--goodput: '" + item + "' is not KEY:MS (e.g. ttft:200)");
    const std::string key = item.substr(0, colon);
    if (key != "ttft" && key != "tpot" && key != "e2el")
      throw std::invalid_argument("--goodput: '" + key + "' is not one of ttft, tpot, e2el");
    const double ms = parse_number(item.substr(colon + 1), "--goodput " + key);
    if (!(ms >= 0)) throw std::invalid_argument("--goodput " + key + " must be non-negative");
    out.emplace_back(key, ms);
  }
  return out;
}

std::vector<std::string> BenchServeConfig::percentile_metric_list() const {
  std::vector<std::string> out = split_any(percentile_metrics, ", ");
  for (const std::string& m : out)
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el")
      throw std::invalid_argument("--percentile-metrics: '" + m +
                                  "' is not one of ttft, tpot, itl, e2el");
  return out;
}

std::vector<double> BenchServeConfig::metric_percentile_list() const {
  std::vector<double> out;
  for (const std::string& s : split_any(metric_percentiles, ", ")) {
    const double p = parse_number(s, "--metric-percentiles");
    if (!(p >= 0 && p <= 100))
      throw std::invalid_argument("--metric-percentiles: " + s + " is outside [0, 100]");
    out.push_back(p);
  }
  return out;
}

std::optional<double> BenchServeConfig::temperature_value() const {
  if (temperature.empty()) return std::nullopt;
  const double t = parse_number(temperature, "--temperature");
  if (!(t >= 0)) throw std::invalid_argument("--temperature must be non-negative");
  return t;
}

std::string BenchServeConfig::effective_base_url() const {
  return base_url.empty() ? "http://" + host + ":" + std::to_string(port) : base_url;
}

void BenchServeConfig::validate() const {
  (void)request_rate_value();
  if (!(burstiness > 0) || !std::isfinite(burstiness))
    throw std::invalid_argument("--burstiness must be a positive finite number");
  if (dataset_name != "random" && dataset_name != "sharegpt" && dataset_name != "jsonl")
    throw std::invalid_argument("--dataset-name must be random, sharegpt or jsonl, got '" +
                                dataset_name + "'");
  if (dataset_name != "random") {
    if (dataset_path.empty())
      throw std::invalid_argument("--dataset-name " + dataset_name + " needs --dataset-path FILE");
    check_readable_file(dataset_path, "--dataset-path");
  }
  if (endpoint != "/v1/completions" && endpoint != "/v1/chat/completions")
    throw std::invalid_argument("--endpoint must be /v1/completions or /v1/chat/completions, got '" +
                                endpoint + "'");
  if (base_url.empty() && (port < 1 || port > 65535))
    throw std::invalid_argument("--port must be in [1, 65535]");
  if (num_prompts < 1 || num_prompts > kMaxNumPrompts)
    throw std::invalid_argument("--num-prompts must be in [1, " + std::to_string(kMaxNumPrompts) + "]");
  if (random_input_len < 1 || random_output_len < 1)
    throw std::invalid_argument("--random-input-len and --random-output-len must be positive");
  for (const auto& [flag, v] : {std::pair<const char*, int64_t>{"--random-input-len", random_input_len},
                                {"--random-output-len", random_output_len},
                                {"--random-prefix-len", random_prefix_len},
                                {"--sharegpt-output-len", sharegpt_output_len},
                                {"--jsonl-output-len", jsonl_output_len}})
    if (v > kMaxLenTokens)
      throw std::invalid_argument(std::string(flag) + " must be at most " +
                                  std::to_string(kMaxLenTokens) + " tokens");
  if (!(random_range_ratio >= 0 && random_range_ratio < 1))
    throw std::invalid_argument("--random-range-ratio must be in [0, 1)");
  if (random_prefix_len < 0) throw std::invalid_argument("--random-prefix-len must be >= 0");
  if (sharegpt_output_len < 0 || jsonl_output_len < 1)
    throw std::invalid_argument("--sharegpt-output-len must be >= 0, --jsonl-output-len positive");
  if (seed < 0) throw std::invalid_argument("--seed must be >= 0");
  if (max_concurrency < 0) throw std::invalid_argument("--max-concurrency must be >= 0");
  if (num_warmups < 0 || num_warmups > kMaxNumPrompts)
    throw std::invalid_argument("--num-warmups must be in [0, " + std::to_string(kMaxNumPrompts) + "]");
  check_seconds(ready_check_timeout_sec, "--ready-check-timeout-sec", /*zero_ok=*/true);
  check_seconds(request_timeout, "--request-timeout", /*zero_ok=*/false);
  (void)goodput_slos();
  (void)percentile_metric_list();
  (void)metric_percentile_list();
  (void)temperature_value();
}

void BenchSweepConfig::validate() const {
  if (model.empty() == base_url.empty())
    throw std::invalid_argument("give exactly one of --model (start `octet serve` per "
                                "configuration) and --base-url (a running server)");
  if (!base_url.empty() && (!kv_cache_dtype.empty() || !serve_grid.empty() || !serve_args.empty()))
    throw std::invalid_argument("--kv-cache-dtype, --serve-grid and --serve-args need --model "
                                "(the sweep starts the server)");
  if (num_prompts < 0) throw std::invalid_argument("--num-prompts must be >= 0");
  check_seconds(server_start_timeout, "--server-start-timeout", /*zero_ok=*/false);
  if (output_dir.empty()) throw std::invalid_argument("--output-dir must not be empty");
  if (output_dir.find_first_of(std::string("\n\r", 2)) != std::string::npos)
    throw std::invalid_argument("--output-dir must not hold a line break (it goes into the "
                                "gnuplot script)");
}

}  // namespace octet
