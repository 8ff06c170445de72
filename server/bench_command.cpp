// `octet bench latency`: prefill and decode tokens/s of one sequence (batch 1).
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "config/generate_config.h"
#include "engine/benchmarks.h"
#include "engine/engine.h"
#include "server/command.h"
#include "server/commands.h"

namespace octet {

namespace {

int run_bench_latency(int argc, const char* const* argv) {
  return cli::run_command<BenchLatencyConfig>("octet bench latency", argc, argv,
                                              [](BenchLatencyConfig& cfg) {
    std::unique_ptr<Engine> engine;
    try {
      EngineArgs args = latency_engine_args(cfg.model, cfg.quantization, cfg.weight_strategy,
                                            cfg.input_len, cfg.output_len);
      args.load_format = cfg.load_format;
      args.tokenizer = cfg.tokenizer;
      args.seed = cfg.seed;
      args.device = cfg.device;
      args.tensor_parallel_size = cfg.tensor_parallel_size;
      args.cache = cfg.cache;
      args.cache.enable_prefix_caching = false;  // every run recomputes the prompt
      if (cfg.max_model_len > 0) args.scheduler.max_model_len = cfg.max_model_len;
      args.threads = cfg.threads;
      args.lm_head_dtype = cfg.lm_head_dtype;
      engine = Engine::create(args);
      std::cerr << engine->startup_report();
    } catch (const std::invalid_argument& e) {
      // The engine's max_model_len is input_len + output_len + 1 (the prefill's token, then
      // one per decode step); bench has no --max-model-len: name the flags the user gave.
      if (std::string(e.what()).find("--max-model-len") == std::string::npos) throw;
      throw std::invalid_argument("--input-len " + std::to_string(cfg.input_len) +
                                  " + --output-len " + std::to_string(cfg.output_len) +
                                  " + 1 do not fit: " + e.what());
    }
    for (int64_t i = 0; i < cfg.num_iters_warmup; ++i)
      bench_latency(*engine, cfg.input_len, cfg.output_len);
    LatencyResult best;
    for (int64_t i = 0; i < cfg.num_iters; ++i) {
      LatencyResult r = bench_latency(*engine, cfg.input_len, cfg.output_len);
      if (i == 0) best = r;
      best.prefill_tokens_per_second =
          std::max(best.prefill_tokens_per_second, r.prefill_tokens_per_second);
      best.decode_tokens_per_second =
          std::max(best.decode_tokens_per_second, r.decode_tokens_per_second);
    }
    // Floor: a decode step reads every weight byte once (KV and activations are small at
    // these lengths), so tokens/s <= bandwidth / weight bytes.
    const double bw = read_bandwidth_gbs();
    const double weight_mb = static_cast<double>(best.decode_weight_bytes) / 1e6;
    const double floor_tps = bw * 1e9 / static_cast<double>(best.decode_weight_bytes);
    nlohmann::json j;
    j["model"] = cfg.model;
    j["linear_format"] = best.linear_format;
    j["input_len"] = best.input_len;
    j["output_len"] = best.output_len;
    j["prefill_tokens_per_second"] = best.prefill_tokens_per_second;
    j["decode_tokens_per_second"] = best.decode_tokens_per_second;
    j["decode_weight_mb"] = weight_mb;
    j["read_bandwidth_gbs"] = bw;
    j["decode_floor_tokens_per_second"] = floor_tps;
    j["fraction_of_floor"] = best.decode_tokens_per_second / floor_tps;
    if (cfg.json) {
      std::cout << j.dump() << "\n";
    } else {
      std::printf("model %s (%s)\n", cfg.model.c_str(), best.linear_format.c_str());
      std::printf("prefill %4lld tokens: %8.1f tokens/s\n", (long long)best.input_len,
                  best.prefill_tokens_per_second);
      std::printf("decode  %4lld tokens: %8.1f tokens/s  (floor %.1f tokens/s = %.1f GB/s / "
                  "%.1f MB of weights per token; %.0f%% of it)\n",
                  (long long)best.output_len, best.decode_tokens_per_second, floor_tps, bw,
                  weight_mb, 100.0 * best.decode_tokens_per_second / floor_tps);
    }
  });
}

}  // namespace

int run_bench(int argc, const char* const* argv) {
  const std::string sub = argc > 1 ? argv[1] : "";
  if (sub == "latency") return run_bench_latency(argc - 1, argv + 1);
  if (sub == "engine") return run_bench_engine(argc - 1, argv + 1);
  if (sub == "serve") return run_bench_serve(argc - 1, argv + 1);
  if (sub == "sweep") return run_bench_sweep(argc - 1, argv + 1);
  if (sub == "kernels") {
    if (argc > 2) {
      std::cerr << "octet bench kernels: takes no arguments, got '" << argv[2] << "'\n";
      return 2;
    }
    std::cout << kernel_benchmark_table(128);
    return 0;
  }
  const bool help = sub == "--help" || sub == "-h";
  if (!help && !sub.empty()) std::cerr << "octet bench: unknown benchmark '" << sub << "'\n";
  (help ? std::cout : std::cerr) << "usage: octet bench latency --model PATH [--quantization auto|fp8|none] "
               "[--input-len N] [--output-len N]\n"
               "       octet bench latency --load-format dummy --model llama-3.1-8b "
               "--tokenizer PATH [--max-model-len N]\n"
               "       octet bench kernels\n"
               "       octet bench engine --model PATH [--concurrency 1,4,16,64] "
               "[--contexts 512,...,8192] [--kv-cache-dtypes bf16,fp8_e4m3]\n"
               "       octet bench serve [--base-url URL] [--num-prompts N] ... (vLLM's flags)\n"
               "       octet bench sweep --model PATH | --base-url URL [--max-concurrency 1,4,16]\n";
  return help ? 0 : 2;
}

}  // namespace octet
