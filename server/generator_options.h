#pragma once
// GeneratorOptions from any command config that has `quantization` and `weight_strategy`.
#include "engine/generator.h"

namespace octet {

template <class Config>
GeneratorOptions generator_options(const Config& cfg) {
  GeneratorOptions o;
  o.quantization = cfg.quantization;
  o.device = cfg.device;
  o.weight_strategy = cfg.weight_strategy;
  return o;
}

}  // namespace octet
