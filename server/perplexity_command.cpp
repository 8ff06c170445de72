// `octet perplexity`: perplexity of a model on a text file, optionally against the
// unquantized model (KL divergence, top-1 agreement).
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "config/generate_config.h"
#include "engine/perplexity.h"
#include "server/command.h"
#include "server/commands.h"

namespace octet {

int run_perplexity(int argc, const char* const* argv) {
  return cli::run_command<PerplexityConfig>("octet perplexity", argc, argv,
                                            [](PerplexityConfig& cfg) {
    std::ifstream in(cfg.text, std::ios::binary);
    if (!in) throw std::runtime_error(cfg.text + ": cannot read the text file");
    std::stringstream ss;
    ss << in.rdbuf();
    PerplexityOptions o;
    o.model = cfg.model;
    o.quantization = cfg.quantization;
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
