#include "config/bench_serve_config.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

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

}  // namespace

double BenchServeConfig::request_rate_value() const {
  if (request_rate == "inf" || request_rate == "Inf" || request_rate == "infinity")
    return INFINITY;
  const double v = parse_number(request_rate, "--request-rate");
  if (!(v > 0) || std::isnan(v))
    throw std::invalid_argument("--request-rate must be a positive number of requests per second "
                                "or inf, got " + request_rate);
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
  if (!(burstiness > 0)) throw std::invalid_argument("--burstiness must be positive");
  if (dataset_name != "random" && dataset_name != "sharegpt" && dataset_name != "jsonl")
    throw std::invalid_argument("--dataset-name must be random, sharegpt or jsonl, got '" +
                                dataset_name + "'");
  if (dataset_name != "random") {
    if (dataset_path.empty())
      throw std::invalid_argument("--dataset-name " + dataset_name + " needs --dataset-path FILE");
    std::ifstream in(dataset_path);
    if (!in) throw std::invalid_argument("--dataset-path '" + dataset_path + "' cannot be read");
  }
  if (endpoint != "/v1/completions" && endpoint != "/v1/chat/completions")
    throw std::invalid_argument("--endpoint must be /v1/completions or /v1/chat/completions, got '" +
                                endpoint + "'");
  if (base_url.empty() && (port < 1 || port > 65535))
    throw std::invalid_argument("--port must be in [1, 65535]");
  if (num_prompts < 1) throw std::invalid_argument("--num-prompts must be positive");
  if (random_input_len < 1 || random_output_len < 1)
    throw std::invalid_argument("--random-input-len and --random-output-len must be positive");
  if (!(random_range_ratio >= 0 && random_range_ratio < 1))
    throw std::invalid_argument("--random-range-ratio must be in [0, 1)");
  if (random_prefix_len < 0) throw std::invalid_argument("--random-prefix-len must be >= 0");
  if (sharegpt_output_len < 0 || jsonl_output_len < 1)
    throw std::invalid_argument("--sharegpt-output-len must be >= 0, --jsonl-output-len positive");
  if (seed < 0) throw std::invalid_argument("--seed must be >= 0");
  if (max_concurrency < 0) throw std::invalid_argument("--max-concurrency must be >= 0");
  if (num_warmups < 0) throw std::invalid_argument("--num-warmups must be >= 0");
  if (!(ready_check_timeout_sec >= 0))
    throw std::invalid_argument("--ready-check-timeout-sec must be >= 0");
  if (!(request_timeout > 0)) throw std::invalid_argument("--request-timeout must be positive");
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
  if (!(server_start_timeout > 0)) throw std::invalid_argument("--server-start-timeout must be positive");
  if (output_dir.empty()) throw std::invalid_argument("--output-dir must not be empty");
}

}  // namespace octet
