// `octet bench serve`: load-test any OpenAI-compatible server with vLLM's metric definitions,
// table and result JSON (bench/serve_bench.h).
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench/serve_bench.h"
#include "config/bench_serve_config.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

namespace {

// vLLM takes `--goodput ttft:200 tpot:50` (several words): join the words after --goodput that
// are not flags into one value for the option parser.
std::vector<std::string> join_goodput_words(int argc, const char* const* argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    out.emplace_back(argv[i]);
    if (std::strcmp(argv[i], "--goodput") != 0) continue;
    std::string joined;
    while (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0)
      joined += (joined.empty() ? "" : " ") + std::string(argv[++i]);
    out.push_back(joined);
  }
  return out;
}

}  // namespace

int run_bench_serve(int argc, const char* const* argv) {
  const std::vector<std::string> args = join_goodput_words(argc, argv);
  std::vector<const char*> ptrs;
  for (const std::string& a : args) ptrs.push_back(a.c_str());
  return cli::run_command<BenchServeConfig>(
      "octet bench serve", static_cast<int>(ptrs.size()), ptrs.data(), [](BenchServeConfig& cfg) {
        bench::ServeBenchResult r = bench::run_serve_bench(cfg, std::cout);
        if (r.metrics.failed > 0) {
          std::cout << "Failed requests during benchmark run detected (capping to 10):\n";
          int shown = 0;
          for (const auto& rec : r.records)
            if (!rec.success && shown < 10) std::cout << "Error " << shown++ << ": " << rec.error << "\n";
        }
        std::cout << bench::format_table(r.metrics, r.run);
        if (!cfg.result_json.empty()) {
          nlohmann::json j = bench::result_json(r.metrics, r.run, r.records);
          j["model_id"] = r.model;
          j["endpoint"] = cfg.endpoint;
          j["num_prompts"] = cfg.num_prompts;
          j["request_rate"] = cfg.request_rate;
          j["burstiness"] = cfg.burstiness;
          j["max_concurrency"] = cfg.max_concurrency > 0 ? nlohmann::json(cfg.max_concurrency)
                                                         : nlohmann::json(nullptr);
          std::ofstream out(cfg.result_json);
          out << j.dump(2) << "\n";
          if (!out) throw std::runtime_error("cannot write --result-json " + cfg.result_json);
        }
        if (r.metrics.completed == 0)
          throw std::runtime_error("all " + std::to_string(r.records.size()) +
                                   " requests failed; first error: " + r.records.front().error);
      });
}

}  // namespace octet
