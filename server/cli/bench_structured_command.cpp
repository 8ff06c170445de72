// `octet bench structured`: what structured outputs cost on a model (engine/structured_output_bench.h):
// grammar compile time per JSON schema, the bitmask's cost per constrained token, and the
// inter-token latency with and without a JSON schema at concurrency 1 and 16.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/engine_args.h"
#include "config/file_read.h"
#include "engine/engine.h"
#include "engine/structured_output_bench.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"
#include "server/cli/int_list.h"

namespace octet {

namespace {

/// Options of `octet bench structured`: the engine's (as `octet generate`) plus the schemas.
struct BenchStructuredConfig {
  EngineArgs engine;
  std::string schemas;  // JSON file: a list of schemas (bench/schemas/schemas20.json)
  std::string concurrency = "1,16";
  int64_t max_tokens = 64;
  int64_t rounds = 5;
  bool json = false;

  template <class Visitor>
  static void visit(BenchStructuredConfig& c, Visitor&& v) {
    EngineArgs::visit(c.engine, v);
    v(c.schemas, "schemas",
      "JSON file holding a list of JSON schemas (or {\"schemas\": [...]}); the ITL runs use the "
      "first");
    v(c.concurrency, "concurrency", "comma-separated concurrencies of the ITL runs");
    v(c.max_tokens, "max_tokens", "tokens generated per request in the ITL runs");
    v(c.rounds, "rounds",
      "rounds of the ITL runs per concurrency, alternating which runs first (median, min-max)");
    v(c.json, "json", "print one JSON object");
  }

  void validate() const {
    engine.validate();
    if (schemas.empty()) throw std::invalid_argument("--schemas is required");
    if (max_tokens < 2) throw std::invalid_argument("--max-tokens must be at least 2");
    if (rounds < 1 || rounds > 1000) throw std::invalid_argument("--rounds must be in [1, 1000]");
  }
};

std::vector<int64_t> parse_concurrency(const std::string& s) {
  std::vector<int64_t> out = parse_list(s, "--concurrency");
  if (out.empty()) throw std::invalid_argument("--concurrency: no value");
  for (int64_t v : out)
    if (v > 4096)
      throw std::invalid_argument("--concurrency: " + std::to_string(v) + " is above 4096");
  return out;
}

/// The schemas of `path` as JSON texts. Throws std::invalid_argument naming the file when it
/// is not a non-empty JSON list of objects (or {"schemas": [...]}).
std::vector<std::string> read_schemas(const std::string& path) {
  const std::string text = read_file_bounded(path, kMaxPromptsFileBytes);
  if (json_nesting_depth(text, 64) > 64)
    throw std::invalid_argument("--schemas " + path + ": nested deeper than 64 levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("--schemas " + path + ": not JSON: " + e.what());
  }
  if (j.is_object() && j.contains("schemas")) j = j["schemas"];
  if (!j.is_array() || j.empty())
    throw std::invalid_argument("--schemas " + path + ": expected a non-empty list of schemas");
  std::vector<std::string> out;
  for (const auto& s : j) {
    if (!s.is_object())
      throw std::invalid_argument("--schemas " + path + ": every schema must be an object");
    out.push_back(s.dump());
  }
  return out;
}

void print_table(const StructuredBenchResult& r) {
  std::cout << std::fixed << std::setprecision(1);
  std::cout << "grammar compile (ms, cold):";
  for (double ms : r.compile_ms) std::cout << " " << ms;
  std::cout << "\nbitmask per constrained token: fill " << r.bitmask_fill_us << " us (" << r.bitmask_fills
            << " fills), apply " << r.bitmask_apply_us << " us\n";
  std::cout << "| concurrency | ITL ms unconstrained | ITL ms json schema | ratio median "
               "(min-max) |\n|---|---|---|---|\n";
  for (const StructuredItl& i : r.itl) {
    std::cout << "| " << i.concurrency << " | " << std::setprecision(2) << i.itl_ms_unconstrained
              << " | " << i.itl_ms_json << " | " << std::setprecision(3) << i.ratio_median << " ("
              << i.ratio_min << "-" << i.ratio_max << ", " << i.rounds << " rounds) |\n";
  }
}

}  // namespace

int run_bench_structured(int argc, const char* const* argv) {
  return cli::run_command<BenchStructuredConfig>("octet bench structured", argc, argv,
                                                 [](BenchStructuredConfig& cfg) {
    const std::vector<std::string> schemas = read_schemas(cfg.schemas);
    const std::vector<int64_t> conc = parse_concurrency(cfg.concurrency);
    EngineArgs args = cfg.engine;
    int64_t max_conc = 1;
    for (int64_t c : conc) max_conc = std::max(max_conc, c);
    if (args.scheduler.max_num_seqs < max_conc) args.scheduler.max_num_seqs = max_conc;
    args.prefault_kv_cache = true;  // no page faults inside the timed steps
    std::unique_ptr<Engine> engine = Engine::create(args);
    std::cerr << engine->startup_report();
    const StructuredBenchResult r = bench_structured(*engine, schemas, conc, cfg.max_tokens, cfg.rounds);
    if (cfg.json)
      std::cout << structured_bench_json(r) << "\n";
    else
      print_table(r);
  });
}

}  // namespace octet
