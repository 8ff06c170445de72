// octet: FP8 LLM inference server. `octet <command> [flags]`; see README.md.
#include <cstring>
#include <iostream>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "server/cli/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: octet <command> [options]\n"
    "commands:\n"
    "  serve      OpenAI-compatible HTTP server (--model PATH [--port 8000] [--config FILE])\n"
    "  generate   generate text (--model PATH --prompt TEXT | --prompt-ids 1,2 | --prompts-file F)\n"
    "  perplexity perplexity of a model on a text (--model PATH --text FILE [--compare])\n"
    "  quantize   write an FP8_DYNAMIC compressed-tensors checkpoint (--model DIR --output DIR)\n"
    "  calibrate  FP8 KV cache scales from calibration text (--model PATH --output F.json|DIR)\n"
    "  kv-report  per-layer FP8 KV accuracy report (--model PATH --text FILE [--target-kl X])\n"
    "  bench      benchmarks: `octet bench latency --model PATH`, `octet bench kernels`,\n"
    "             `octet bench engine --model PATH`, `octet bench serve`, `octet bench sweep`\n"
    "  plan       KV and weight memory, sequences that fit, decode floors (--model --device)\n"
    "run `octet <command> --help` for its options\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  // Logs (the engine's warnings, errors) go to stderr, except serve's, which go to stdout as
  // they always did: generate / bench / perplexity keep stdout for their output (--json) and
  // log warnings and errors only (start-up facts such as the device are serve's to print).
  if (cmd != "serve") {
    spdlog::set_default_logger(spdlog::stderr_color_mt("octet"));
    spdlog::set_level(spdlog::level::warn);
  }
  // program_options expects argv[0] to be the program: pass the subcommand in its place.
  if (cmd == "serve") return octet::run_serve(argc - 1, argv + 1);
  if (cmd == "generate") return octet::run_generate(argc - 1, argv + 1);
  if (cmd == "bench") return octet::run_bench(argc - 1, argv + 1);
  if (cmd == "perplexity") return octet::run_perplexity(argc - 1, argv + 1);
  if (cmd == "calibrate") return octet::run_calibrate(argc - 1, argv + 1);
  if (cmd == "kv-report") return octet::run_kv_report(argc - 1, argv + 1);
  if (cmd == "quantize") return octet::run_quantize(argc - 1, argv + 1);
  if (cmd == "plan") return octet::run_plan(argc - 1, argv + 1);
  std::cerr << "octet: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
