// `octet perplexity`: perplexity of a model on a text file, optionally against the
// unquantized model (KL divergence, top-1 agreement).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "config/generate_config.h"
#include "config/engine_args.h"
#include "engine/kv_accuracy.h"
#include "engine/perplexity.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

int run_perplexity(int argc, const char* const* argv) {
  return cli::run_command<PerplexityConfig>("octet perplexity", argc, argv,
                                            [](PerplexityConfig& cfg) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(cfg.text, ec))
      throw std::runtime_error(cfg.text + ": not a readable regular file");
    std::ifstream in(cfg.text, std::ios::binary);
    if (!in) throw std::runtime_error(cfg.text + ": cannot read the text file");
    // Only the start of the text is scored: read at most 64 bytes per wanted token (1 MiB at
    // least), so a huge file costs no more than the tokens asked for.
    const int64_t limit = std::max<int64_t>(int64_t{1} << 20, cfg.max_tokens * 64);
    std::string text(static_cast<size_t>(limit), '\0');
    in.read(text.data(), limit);
    text.resize(static_cast<size_t>(in.gcount()));
    std::stringstream ss(text);
    if (!cfg.kv_cache_dtype.empty()) {
      EngineArgs args = model_engine_args(cfg);
      args.cache.kv_cache_dtype = cfg.kv_cache_dtype;
      args.cache.kv_cache_dtype_skip_layers = cfg.kv_cache_dtype_skip_layers;
      args.cache.kv_scales_path = cfg.kv_scales_path;
      args.cache.calculate_kv_scales = cfg.calculate_kv_scales;
      args.cache.kv_cache_rotation = cfg.kv_cache_rotation;
      args.validate();
      const KVAccuracyResult r = compare_kv_cache_dtype(args, ss.str(), cfg.max_tokens);
      nlohmann::json j;
      j["kv_cache_dtype"] = r.kv_cache_dtype;
      j["kv_cache_rotation"] = cfg.kv_cache_rotation;
      j["tokens"] = r.tokens;
      j["perplexity"] = r.perplexity;
      j["bf16_kv_perplexity"] = r.baseline_perplexity;
      j["perplexity_change"] = r.perplexity / r.baseline_perplexity - 1.0;
      j["top1_agreement"] = r.top1_agreement;
      j["mean_abs_logprob_diff"] = r.mean_abs_logprob_diff;
      j["max_abs_logprob_diff"] = r.max_abs_logprob_diff;
      if (cfg.json) {
        std::cout << j.dump() << "\n";
      } else {
        for (auto it = j.begin(); it != j.end(); ++it)
          std::cout << it.key() << ": " << it.value().dump() << "\n";
      }
      return;
    }
    PerplexityOptions o;
    o.model = cfg.model;
    o.load_format = cfg.load_format;
    o.tokenizer = cfg.tokenizer;
    o.quantization = cfg.quantization;
    o.device = cfg.device;
    o.tensor_parallel_size = cfg.tensor_parallel_size;
    o.threads = cfg.threads;
    o.lm_head_dtype = cfg.lm_head_dtype;
    o.weight_strategy = cfg.weight_strategy;
    o.max_tokens = cfg.max_tokens;
    o.compare = cfg.compare;
    const PerplexityResult r = compute_perplexity(o, ss.str());
    nlohmann::json j;
    j["perplexity"] = r.perplexity;
    j["tokens"] = r.tokens;
    j["window"] = r.window;
    j["linear_format"] = r.linear_format;
    if (cfg.compare) {
      j["reference_perplexity"] = r.reference_perplexity;
      j["perplexity_change"] = r.perplexity / r.reference_perplexity - 1.0;
      j["kl_divergence"] = r.kl_divergence;
      j["top1_agreement"] = r.top1_agreement;
    }
    if (cfg.json) {
      std::cout << j.dump() << "\n";
    } else {
      for (auto it = j.begin(); it != j.end(); ++it)
        std::cout << it.key() << ": " << it.value().dump() << "\n";
    }
  });
}

}  // namespace octet
