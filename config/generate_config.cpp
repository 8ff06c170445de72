#include "config/generate_config.h"

#include <cmath>
#include <stdexcept>

namespace octet {

void GenerateConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  if (prompt.empty() == prompt_ids.empty())
    throw std::invalid_argument("give exactly one of --prompt and --prompt-ids");
  if (max_tokens < 0) throw std::invalid_argument("--max-tokens must be >= 0");
  if (!std::isfinite(temperature) || temperature < 0)
    throw std::invalid_argument("--temperature must be a finite number >= 0");
  if (!(top_p > 0 && top_p <= 1)) throw std::invalid_argument("--top-p must be in (0, 1]");
}

void BenchLatencyConfig::validate() const {
  if (model.empty()) throw std::invalid_argument("--model is required");
  if (input_len <= 0 || output_len <= 0 || num_iters <= 0)
    throw std::invalid_argument("--input-len, --output-len and --num-iters must be positive");
}

}  // namespace octet
