// `octet bench latency`: prefill and decode tokens/s of one sequence (batch 1) against the
// bytes / bandwidth floor; `octet bench kernels`: the CPU kernel table, or with --device the
// GEMM and attention figures (docs/benchmarks.md, "Device figures"); and the dispatch of
// `octet bench SUB`.
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "config/generate_config.h"
#include "engine/benchmarks.h"
#include "engine/engine.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

namespace {

/// Options of `octet bench kernels`: without --device the CPU kernel table, with it the device
/// figures (engine/benchmarks.h kernel_figures_json).
struct BenchKernelsConfig {
  std::string device;  // "": the CPU kernel table
  bool json = false;

  template <class Visitor>
  static void visit(BenchKernelsConfig& c, Visitor&& v) {
    v(c.device, "device",
      "cpu, cuda, cuda:N or auto: GEMM TFLOP/s against the measured peak and paged decode "
      "attention bandwidth against a measured copy (Llama-3.1-8B sizes on CUDA, tiny ones on "
      "the CPU); without it, the CPU kernel table");
    v(c.json, "json", "print the device figures as one JSON object (--device auto if not given)");
  }

  void validate() const {}
};

int run_bench_kernels(int argc, const char* const* argv) {
  return cli::run_command<BenchKernelsConfig>("octet bench kernels", argc, argv,
                                              [](BenchKernelsConfig& cfg) {
    if (cfg.device.empty() && !cfg.json) {
      std::cout << kernel_benchmark_table(128);
      return;
    }
    const std::string text = kernel_figures_json(cfg.device.empty() ? "auto" : cfg.device);
    if (cfg.json)
      std::cout << text << "\n";
    else
      std::cout << nlohmann::json::parse(text).dump(2) << "\n";
  });
}

int run_bench_latency(int argc, const char* const* argv) {
  return cli::run_command<BenchLatencyConfig>("octet bench latency", argc, argv,
                                              [](BenchLatencyConfig& cfg) {
    // The floor's bandwidth, measured before the engine takes the device's memory: the
    // device-to-device copy on CUDA, the read bandwidth on the CPU.
    const DeviceBandwidth bandwidth = device_bandwidth(cfg.device);
    const double bw = bandwidth.gbs;
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
      args.prefault_kv_cache = true;  // no page faults inside the timed steps
      args.count_kernel_launches = true;  // the CPU's rehearsal of the CUDA kernel count
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
    // Floor: a decode step reads every weight byte once and the KV of its context (decode
    // step i of output_len attends over input_len + i tokens: on average input_len +
    // (output_len + 1) / 2), at the measured bandwidth (tensor-parallel GPUs read in
    // parallel, each at its own; CPU ranks share one memory).
    const double kv_bytes = static_cast<double>(best.kv_bytes_per_token) *
                            (static_cast<double>(best.input_len) +
                             static_cast<double>(best.output_len + 1) / 2.0);
    const double step_bytes = static_cast<double>(best.decode_weight_bytes) + kv_bytes;
    const double bw_total = bandwidth.source == "cpu_read"
                                ? bw
                                : bw * static_cast<double>(cfg.tensor_parallel_size);
    const double weight_mb = static_cast<double>(best.decode_weight_bytes) / 1e6;
    const double floor_tps = bw_total * 1e9 / step_bytes;
    const double itl_ms = best.decode_tokens_per_second > 0
                              ? 1000.0 / best.decode_tokens_per_second : 0.0;
    const double floor_ms = 1000.0 / floor_tps;
    nlohmann::json j;
    j["model"] = cfg.model;
    j["linear_format"] = best.linear_format;
    j["input_len"] = best.input_len;
    j["output_len"] = best.output_len;
    j["prefill_tokens_per_second"] = best.prefill_tokens_per_second;
    j["decode_tokens_per_second"] = best.decode_tokens_per_second;
    j["decode_weight_mb"] = weight_mb;
    j["decode_weight_bytes_per_step"] = best.decode_weight_bytes;
    j["decode_kv_bytes_per_step"] = kv_bytes;
    j["decode_bytes_per_step"] = step_bytes;
    j["read_bandwidth_gbs"] = bw;
    j["bandwidth_source"] = bandwidth.source;
    j["decode_floor_tokens_per_second"] = floor_tps;
    j["fraction_of_floor"] = best.decode_tokens_per_second / floor_tps;
    j["itl_ms"] = itl_ms;
    j["itl_floor_ms"] = floor_ms;
    j["itl_over_floor"] = itl_ms / floor_ms;
    if (bandwidth.source == "cpu_read") j["cpu_w8a8_kernel"] = cpu_w8a8_kernel();
    // Kernels per decode step: a CUDA graph's kernel nodes, or on the CPU (TP 1) the launches
    // the CUDA backend would make for the same ops (kernels/launch_counter.h).
    const int64_t kernels = engine->decode_step_kernels();
    const int64_t layers = engine->num_hidden_layers();
    const char* kernels_source = bandwidth.source == "cpu_read" ? "cpu_rehearsal" : "cuda_graph";
    // Not counted: the CPU rehearsal at TP > 1 (it counts rank 0's ops at TP 1 only), or a
    // CUDA run without a decode graph.
    const std::string kernels_na =
        cfg.tensor_parallel_size > 1 && bandwidth.source == "cpu_read"
            ? "n/a (the CPU counts the CUDA launches at --tensor-parallel-size 1 only)"
            : "n/a (no decode step ran as a CUDA graph)";
    j["decode_step_kernels_source"] = kernels_source;
    if (kernels >= 0) {
      j["decode_step_kernels"] = kernels;
      j["decode_step_kernels_per_layer"] = static_cast<double>(kernels) / layers;
    } else {
      j["decode_step_kernels"] = kernels_na;
      j["decode_step_kernels_per_layer"] = kernels_na;
    }
    if (cfg.json) {
      std::cout << j.dump() << "\n";
    } else {
      std::printf("model %s (%s)\n", cfg.model.c_str(), best.linear_format.c_str());
      if (bandwidth.source == "cpu_read")
        std::printf("CPU W8A8 kernel: %s\n", cpu_w8a8_kernel().c_str());
      std::printf("prefill %4lld tokens: %8.1f tokens/s\n", (long long)best.input_len,
                  best.prefill_tokens_per_second);
      std::printf("decode  %4lld tokens: %8.1f tokens/s  (floor %.1f tokens/s = %.1f GB/s / "
                  "%.1f MB of weights + %.1f MB of KV per token; %.0f%% of it)\n",
                  (long long)best.output_len, best.decode_tokens_per_second, floor_tps,
                  bw_total, weight_mb, kv_bytes / 1e6,
                  100.0 * best.decode_tokens_per_second / floor_tps);
      std::printf("ITL %.3f ms, floor %.3f ms: %.2fx the floor\n", itl_ms, floor_ms,
                  itl_ms / floor_ms);
      if (kernels >= 0)
        std::printf("kernels per decode step: %lld (%.1f per layer, %lld layers; %s)\n",
                    (long long)kernels, static_cast<double>(kernels) / layers,
                    (long long)layers,
                    bandwidth.source == "cpu_read"
                        ? "the CUDA backend's launches for these ops, counted on the CPU"
                        : "the batch-1 CUDA graph's kernel nodes");
      else
        std::printf("kernels per decode step: %s\n", kernels_na.c_str());
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
  if (sub == "kernels") return run_bench_kernels(argc - 1, argv + 1);
  if (sub == "structured") return run_bench_structured(argc - 1, argv + 1);
  const bool help = sub == "--help" || sub == "-h";
  if (!help && !sub.empty()) std::cerr << "octet bench: unknown benchmark '" << sub << "'\n";
  (help ? std::cout : std::cerr) << "usage: octet bench latency --model PATH [--quantization auto|fp8|none] "
               "[--input-len N] [--output-len N]\n"
               "       octet bench latency --load-format dummy --model llama-3.1-8b "
               "--tokenizer PATH [--max-model-len N]\n"
               "       octet bench kernels [--device cpu|cuda|cuda:N [--json]]\n"
               "       octet bench engine --model PATH [--concurrency 1,4,16,64] "
               "[--contexts 512,...,8192] [--kv-cache-dtypes bf16,fp8_e4m3]\n"
               "       octet bench serve [--base-url URL] [--num-prompts N] ... (vLLM's flags)\n"
               "       octet bench sweep --model PATH | --base-url URL [--max-concurrency 1,4,16]\n"
               "       octet bench structured --model PATH --schemas FILE [--concurrency 1,16]\n";
  return help ? 0 : 2;
}

}  // namespace octet
