// `octet plan`: KV and weight memory, sequences that fit and decode floors (bench/plan.h).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "bench/plan.h"
#include "config/plan_config.h"
#include "engine/benchmarks.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

namespace {

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kib;
      return kib * 1024;
    }
    std::getline(in, key);
  }
  throw std::runtime_error("cannot read MemTotal from /proc/meminfo: pass --device-memory-gib");
}

std::vector<int64_t> skip_layers(const std::string& spec, const bench::ModelShape& m) {
  std::vector<int64_t> out;
  if (spec.empty()) return out;
  if (spec == "sliding_window") {
    for (size_t l = 0; l < m.layer_sliding_window.size(); ++l)
      if (m.layer_sliding_window[l] > 0) out.push_back(static_cast<int64_t>(l));
    return out;
  }
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0)
      throw std::invalid_argument("--kv-cache-dtype-skip-layers: '" + item +
                                  "' is not a layer index (or use sliding_window)");
    out.push_back(v);
  }
  return out;
}

}  // namespace

int run_plan(int argc, const char* const* argv) {
  return cli::run_command<PlanConfig>("octet plan", argc, argv, [](PlanConfig& cfg) {
    bench::PlanInputs in;
    in.model = bench::load_model_shape(cfg.model);
    in.device = *bench::device_preset(cfg.device);
    constexpr double kGiB = 1024.0 * 1024 * 1024;
    if (cfg.device_memory_gib > 0) in.device.memory_bytes = cfg.device_memory_gib * kGiB;
    else if (cfg.device == "cpu") in.device.memory_bytes = mem_total_bytes();
    if (cfg.bandwidth_gbs > 0) in.device.bandwidth_bytes_s = cfg.bandwidth_gbs * 1e9;
    else if (cfg.device == "cpu") in.device.bandwidth_bytes_s = read_bandwidth_gbs() * 1e9;
    in.tensor_parallel_size = cfg.tensor_parallel_size;
    in.max_model_len = cfg.max_model_len > 0 ? cfg.max_model_len : in.model.max_position_embeddings;
    in.batch_size = cfg.batch_size;
    in.gpu_memory_utilization = cfg.gpu_memory_utilization;
    in.reserved_bytes = cfg.reserved_memory_gib * kGiB;
    in.skip_layers = skip_layers(cfg.kv_cache_dtype_skip_layers, in.model);
    in.weight_dtype = cfg.weight_dtype;
    in.kv_cache_dtype = cfg.kv_bits();
    const std::vector<bench::PlanRow> rows = bench::make_plan(in);
    if (cfg.json) std::cout << bench::plan_json(in, rows).dump() << "\n";
    else std::cout << bench::plan_table(in, rows);
  });
}

}  // namespace octet
