// fuzz-layer: models
// libFuzzer harness: bytes -> a config.json as octet reads it: parse_config_json (bounded
// nesting, errors naming the file), ModelConfig::from_hf_config (field types and ranges,
// ModelConfig::validate) and QuantConfig::from_hf_config (PCRE2 "re:" entries), then what a
// loader does with the result: the RoPE frequencies, the parameter count, and is_quantized on
// the linear modules of the first layers (regex matches under their limits). The expected
// failure is ModelFileError; a crash, a hang, a sanitizer report or any other exception is a
// finding.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "models/config_json.h"
#include "models/model_config.h"
#include "models/model_file_error.h"
#include "models/quant_config.h"
#include "models/quant_validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = "fuzz/config.json";
  nlohmann::json config;
  try {
    config = octet::parse_config_json(std::string(reinterpret_cast<const char*>(data), size), path);
  } catch (const octet::ModelFileError&) {
    return 0;
  }
  int64_t layers = 2;
  try {
    const octet::ModelConfig c = octet::ModelConfig::from_hf_config(config, path);
    // What validate() promises: sizes in range, frequencies finite, windows per layer.
    if (c.num_parameters() < 0 || c.hidden_size < 1 || c.num_hidden_layers > c.kMaxLayers)
      std::abort();
    for (float f : c.rope_inv_freq())
      if (!std::isfinite(f) || !(f > 0.0f)) std::abort();
    if (!c.layer_sliding_window.empty() &&
        int64_t(c.layer_sliding_window.size()) != c.num_hidden_layers)
      std::abort();
    layers = c.num_hidden_layers;
  } catch (const octet::ModelFileError&) {
  }
  try {
    const octet::QuantConfig q = octet::QuantConfig::from_hf_config(config, path);
    for (int64_t l = 0; l < std::min<int64_t>(layers, 2); ++l)
      for (const std::string& m : octet::llama_linear_modules(l)) (void)q.is_quantized(m);
    (void)q.is_quantized("lm_head");
  } catch (const octet::ModelFileError&) {
  }
  return 0;
}
