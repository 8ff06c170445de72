// `octet bench latency`: prefill and decode tokens/s of one sequence (batch 1).
#include <iostream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "config/generate_config.h"
#include "engine/generator.h"
#include "server/cli.h"
#include "server/commands.h"

namespace octet {

namespace {

int run_bench_latency(int argc, const char* const* argv) {
  BenchLatencyConfig cfg;
  try {
    std::string help;
    if (!cli::parse_flags(cfg, argc, argv, "octet bench latency options", help)) {
      std::cout << help;
      return 0;
    }
    cfg.validate();
  } catch (const std::invalid_argument& e) {
    std::cerr << "octet bench latency: " << e.what() << "\n";
    return 2;
  }
  try {
    auto gen = Generator::load(cfg.model);
    ThroughputResult best;
    for (int64_t i = 0; i < cfg.num_iters; ++i) {
      ThroughputResult r = gen->bench(cfg.input_len, cfg.output_len);
      if (i == 0) best = r;
      best.prefill_tokens_per_second =
          std::max(best.prefill_tokens_per_second, r.prefill_tokens_per_second);
      best.decode_tokens_per_second =
          std::max(best.decode_tokens_per_second, r.decode_tokens_per_second);
    }
    if (cfg.json) {
      nlohmann::json j;
      j["model"] = cfg.model;
      j["path"] = "fp32-reference";
      j["input_len"] = best.input_len;
      j["output_len"] = best.output_len;
      j["prefill_tokens_per_second"] = best.prefill_tokens_per_second;
      j["decode_tokens_per_second"] = best.decode_tokens_per_second;
      std::cout << j.dump() << "\n";
    } else {
      std::cout << "model " << cfg.model << " (fp32 reference)\n"
                << "prefill " << best.input_len << " tokens: " << best.prefill_tokens_per_second
                << " tokens/s\n"
                << "decode  " << best.output_len << " tokens: " << best.decode_tokens_per_second
                << " tokens/s\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "octet bench latency: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int run_bench(int argc, const char* const* argv) {
  const std::string sub = argc > 1 ? argv[1] : "";
  if (sub == "latency") return run_bench_latency(argc - 1, argv + 1);
  std::cerr << "usage: octet bench latency --model PATH [--input-len N] [--output-len N]\n";
  return 2;
}

}  // namespace octet
