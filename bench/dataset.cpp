#include "bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "config/bench_serve_config.h"
#include "config/file_read.h"
#include "models/gguf.h"
#include "models/tokenizer.h"

namespace octet::bench {

std::unique_ptr<Tokenizer> load_bench_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw std::invalid_argument("tokenizer '" + path + "' does not exist (pass --tokenizer: a "
                                "GGUF file or a Hugging Face directory)");
  if (fs::is_directory(path, ec)) return Tokenizer::from_hf_dir(path);
  return Tokenizer::from_gguf(GGUFFile::open(path));
}

int64_t count_tokens(const Tokenizer& tok, const std::string& text) {
  return static_cast<int64_t>(tok.encode(text, /*add_special=*/false, /*parse_special=*/false).size());
}

namespace {

// Word tokens (" word": a space, then ASCII letters) that encode back to themselves: text made
// of them re-tokenizes to the same ids (the pre-tokenizers split at spaces), so lengths are
// exact. Falls back to every ordinary token for a vocabulary without such words.
std::vector<int32_t> ordinary_ids(const Tokenizer& tok) {
  std::vector<int32_t> words, all;
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    if (tok.is_special(i)) continue;
    all.push_back(i);
    const std::string b = tok.token_bytes(i);
    if (b.size() < 3 || b[0] != ' ') continue;
    bool letters = true;
    for (size_t k = 1; k < b.size(); ++k)
      letters = letters && ((b[k] >= 'a' && b[k] <= 'z') || (b[k] >= 'A' && b[k] <= 'Z'));
    if (!letters) continue;
    const std::vector<int32_t> two = tok.encode(tok.decode({i, i}, false), false, false);
    if (two.size() == 2 && two[0] == i && two[1] == i) words.push_back(i);
  }
  if (words.size() >= 32) return words;
  if (all.empty()) throw std::invalid_argument("the tokenizer has no ordinary tokens");
  return all;
}

// Text whose encoding is `target` tokens long, starting from `ids` (random draws append more).
std::pair<std::string, int64_t> text_of_length(const Tokenizer& tok, std::vector<int32_t> ids,
                                               int64_t target, const std::vector<int32_t>& pool,
                                               std::mt19937_64& rng) {
  std::string text;
  int64_t len = 0;
  for (int attempt = 0; attempt < 32; ++attempt) {
    text = tok.decode(ids, /*skip_special=*/false);
    std::vector<int32_t> enc = tok.encode(text, false, false);
    len = static_cast<int64_t>(enc.size());
    if (len == target) break;
    if (len > target) {
      enc.resize(static_cast<size_t>(target));
      ids = std::move(enc);
    } else {
      ids = std::move(enc);
      while (static_cast<int64_t>(ids.size()) < target) ids.push_back(pool[rng() % pool.size()]);
    }
  }
  return {text, len};
}

int64_t draw_len(int64_t len, double ratio, std::mt19937_64& rng) {
  const int64_t lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - ratio)));
  const int64_t hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1 + ratio)));
  if (hi <= lo) return lo;
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// The whole dataset file, at most kMaxDatasetFileBytes: a FileReadError (a FIFO, /dev/zero, a
// directory, a file over the cap) becomes one line naming the flag and the file.
std::string read_dataset(const std::string& path) {
  try {
    return read_file_bounded(path, kMaxDatasetFileBytes);
  } catch (const FileReadError& e) {
    throw std::invalid_argument("--dataset-path '" + path + "': " + e.problem());
  }
}

}  // namespace

std::vector<RequestSpec> random_dataset(const Tokenizer& tok, const RandomDatasetOptions& o) {
  std::mt19937_64 rng(o.seed);
  const std::vector<int32_t> pool = ordinary_ids(tok);
  std::vector<int32_t> prefix;
  for (int64_t i = 0; i < o.prefix_len; ++i) prefix.push_back(pool[rng() % pool.size()]);
  std::vector<RequestSpec> out;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    const int64_t in_len = std::max<int64_t>(draw_len(o.input_len, o.range_ratio, rng), 1);
    const int64_t out_len = std::max<int64_t>(draw_len(o.output_len, o.range_ratio, rng), 1);
    std::vector<int32_t> ids = prefix;
    for (int64_t k = 0; k < in_len; ++k) ids.push_back(pool[rng() % pool.size()]);
    auto [text, len] = text_of_length(tok, ids, o.prefix_len + in_len, pool, rng);
    out.push_back({text, len, out_len});
  }
  return out;
}

std::vector<RequestSpec> sharegpt_dataset(const std::string& path, const Tokenizer& tok,
                                          int64_t num_prompts, int64_t output_len, uint64_t seed) {
  const nlohmann::json j = parse_reply_json(read_dataset(path));
  if (j.is_discarded() || !j.is_array())
    throw std::invalid_argument("--dataset-path '" + path + "' is not a ShareGPT JSON list (or "
                                "nests deeper than " + std::to_string(kMaxJsonDepth) + ")");
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array()) continue;
    const auto& c = e["conversations"];
    if (c.size() < 2 || !c[0].is_object() || !c[1].is_object()) continue;
    if (!c[0].contains("value") || !c[1].contains("value") || !c[0]["value"].is_string() ||
        !c[1]["value"].is_string())
      continue;
    pairs.emplace_back(c[0]["value"].get<std::string>(), c[1]["value"].get<std::string>());
  }
  std::mt19937_64 rng(seed);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  std::vector<RequestSpec> out;
  for (const auto& [prompt, completion] : pairs) {
    if (static_cast<int64_t>(out.size()) >= num_prompts) break;
    const int64_t p = count_tokens(tok, prompt);
    const int64_t c = output_len > 0 ? output_len : count_tokens(tok, completion);
    if (p < 4 || c < 4 || p > 1024 || p + c > 2048) continue;
    out.push_back({prompt, p, c});
  }
  if (static_cast<int64_t>(out.size()) < num_prompts)
    throw std::invalid_argument("--dataset-path '" + path + "' has " + std::to_string(out.size()) +
                                " usable conversations, fewer than --num-prompts " +
                                std::to_string(num_prompts));
  return out;
}

std::vector<RequestSpec> jsonl_dataset(const std::string& path, const Tokenizer& tok,
                                       int64_t num_prompts, int64_t output_len) {
  std::istringstream in(read_dataset(path));
  std::vector<RequestSpec> lines;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = parse_reply_json(line);
    RequestSpec r;
    r.max_tokens = output_len;
    if (j.is_string()) {
      r.prompt = j.get<std::string>();
    } else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
      r.prompt = j["prompt"].get<std::string>();
      if (auto o = j.find("output_tokens"); o != j.end()) {
        // A positive count within the bound of the length flags.
        constexpr int64_t kMax = BenchServeConfig::kMaxLenTokens;
        const bool ok = o->is_number_unsigned()
                            ? o->get<uint64_t>() >= 1 && o->get<uint64_t>() <= uint64_t{kMax}
                            : o->is_number_integer() && o->get<int64_t>() >= 1 &&
                                  o->get<int64_t>() <= kMax;
        if (!ok)
          throw std::invalid_argument("--dataset-path '" + path + "' line " +
                                      std::to_string(lineno) + ": output_tokens must be an " +
                                      "integer in [1, " + std::to_string(kMax) + "]");
        r.max_tokens = o->get<int64_t>();
      }
    } else {
      throw std::invalid_argument("--dataset-path '" + path + "' line " + std::to_string(lineno) +
                                  ": expected {\"prompt\": \"...\"} or a JSON string");
    }
    r.prompt_len = count_tokens(tok, r.prompt);
    lines.push_back(std::move(r));
  }
  if (lines.empty()) throw std::invalid_argument("--dataset-path '" + path + "' has no prompts");
  // Cycling copies prompts: the workload's text stays within the cap of the file itself.
  size_t bytes = 0;
  for (int64_t i = 0; i < num_prompts; ++i) {
    bytes += lines[static_cast<size_t>(i) % lines.size()].prompt.size();
    if (bytes > kMaxDatasetFileBytes)
      throw std::invalid_argument("--dataset-path '" + path + "': " + std::to_string(num_prompts) +
                                  " prompts cycled from this file hold over " +
                                  std::to_string(kMaxDatasetFileBytes) +
                                  " bytes; lower --num-prompts");
  }
  std::vector<RequestSpec> out;
  for (int64_t i = 0; i < num_prompts; ++i) out.push_back(lines[static_cast<size_t>(i) % lines.size()]);
  return out;
}

std::vector<double> arrival_times(size_t n, double request_rate, double burstiness, uint64_t seed) {
  if (!(request_rate > 0)) throw std::invalid_argument("--request-rate must be positive (or inf)");
  if (!(burstiness > 0)) throw std::invalid_argument("--burstiness must be positive");
  std::vector<double> t(n, 0.0);
  if (std::isinf(request_rate) || n == 0) return t;
  if (!std::isfinite(burstiness)) throw std::invalid_argument("--burstiness must be finite");
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double sum = 0;
  for (size_t i = 0; i < n; ++i) t[i] = sum += gap(rng);
  // Rescaled as fractions of the last arrival (in [0, 1]), so that no step overflows. With a
  // tiny burstiness every gap may round to 0 (or their sum overflow): then all arrive at once.
  const double last = t.back(), total = static_cast<double>(n) / request_rate;
  if (!(last > 0) || !std::isfinite(last)) return std::vector<double>(n, 0.0);
  for (double& x : t) x = std::min(x / last, 1.0) * total;
  return t;
}

}  // namespace octet::bench
