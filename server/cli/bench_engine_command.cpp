// `octet bench engine`: what continuous batching and the FP8 KV cache buy, measured through
// the Engine facade like a client would:
//  1. aggregate decode tokens/s with 1, 4, 16, 64 sequences decoding at once;
//  2. decode inter-token latency (ITL) against context length, per kv_cache_dtype, with the
//     least-squares slope in ms per 1K context tokens (the cost of reading the KV cache).
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <map>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "config/bench_config.h"
#include "engine/engine.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"
#include "server/cli/int_list.h"

namespace octet {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& t : ids) t = static_cast<int32_t>(100 + rng() % static_cast<uint64_t>(vocab - 200));
  return ids;
}

// Times of every output of one stream (steady clock).
std::vector<Clock::time_point> drain(RequestStream& s) {
  std::vector<Clock::time_point> times;
  while (auto o = s.next()) {
    if (!o->error.empty()) throw std::runtime_error(o->error);
    for (size_t i = 0; i < o->token_ids.size(); ++i) times.push_back(Clock::now());
  }
  return times;
}

struct ThroughputPoint {
  int64_t concurrency;
  double decode_tokens_per_second;
  double mean_itl_ms;
};

// All sequences prefill, then decode together: aggregate decode tokens/s over the window in
// which every sequence is decoding (after the last first token, before the first finish).
ThroughputPoint run_throughput(Engine& engine, int64_t c, const BenchEngineConfig& cfg) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = cfg.output_len;
  p.ignore_eos = true;
  static int run = 0;
  ++run;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int64_t i = 0; i < c; ++i)
    streams.push_back(engine.add_request(
        "tp" + std::to_string(run) + "-" + std::to_string(i),
        random_ids(cfg.input_len, engine.vocab_size(), 1000 * run + i), p));
  std::vector<std::vector<Clock::time_point>> times(static_cast<size_t>(c));
  std::vector<std::thread> readers;
  for (int64_t i = 0; i < c; ++i)
    readers.emplace_back([&, i] { times[i] = drain(*streams[i]); });
  for (auto& t : readers) t.join();
  Clock::time_point start = times[0].front(), end = times[0].back();
  for (const auto& t : times) start = std::max(start, t.front()), end = std::min(end, t.back());
  int64_t tokens = 0;
  double itl_sum = 0;
  int64_t itl_n = 0;
  for (const auto& t : times) {
    for (size_t k = 1; k < t.size(); ++k) {
      if (t[k] > start && t[k] <= end) ++tokens;
      itl_sum += std::chrono::duration<double, std::milli>(t[k] - t[k - 1]).count();
      ++itl_n;
    }
  }
  const double window = std::chrono::duration<double>(end - start).count();
  return {c, window > 0 ? tokens / window : 0.0, itl_n ? itl_sum / itl_n : 0.0};
}

// Mean ITL of one sequence decoding `itl_tokens` tokens after a prompt of `context` tokens
// (prefixes of one long prompt, so the prefix cache saves most of each prefill).
double run_itl(Engine& engine, const std::vector<int32_t>& long_prompt, int64_t context,
               int64_t itl_tokens, int index) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = itl_tokens + 1;
  p.ignore_eos = true;
  std::vector<int32_t> prompt(long_prompt.begin(), long_prompt.begin() + context);
  auto stream = engine.add_request("itl" + std::to_string(index), prompt, p);
  const auto t = drain(*stream);
  // Skip the first token (prefill) and use the median of the decode intervals: robust to a
  // stray scheduling hiccup on a shared machine.
  std::vector<double> gaps;
  for (size_t k = 1; k < t.size(); ++k)
    gaps.push_back(std::chrono::duration<double, std::milli>(t[k] - t[k - 1]).count());
  std::sort(gaps.begin(), gaps.end());
  return gaps.empty() ? 0.0 : gaps[gaps.size() / 2];
}

// Least-squares slope of y over x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double d = n * sxx - sx * sx;
  return d != 0 ? (n * sxy - sx * sy) / d : 0.0;
}

}  // namespace

int run_bench_engine(int argc, const char* const* argv) {
  return cli::run_command<BenchEngineConfig>("octet bench engine", argc, argv,
                                             [](BenchEngineConfig& cfg) {
    const std::vector<int64_t> concurrency = parse_list(cfg.concurrency, "--concurrency");
    const std::vector<int64_t> contexts = parse_list(cfg.contexts, "--contexts");
    nlohmann::json j;
    j["model"] = cfg.model;
    std::ostream& os = cfg.json ? std::cerr : std::cout;
    os << std::fixed << std::setprecision(2);
    if (!concurrency.empty()) {
      EngineArgs a = model_engine_args(cfg);
      a.cache.kv_cache_memory_bytes = cfg.kv_cache_memory_bytes;
      a.cache.gpu_memory_utilization = cfg.gpu_memory_utilization;
      a.cache.kv_cache_dtype = cfg.throughput_kv_cache_dtype;
      a.cache.calculate_kv_scales = true;
      a.scheduler.max_model_len = cfg.input_len + cfg.output_len + 16;
      a.scheduler.max_num_seqs = *std::max_element(concurrency.begin(), concurrency.end());
      a.prefault_kv_cache = true;  // no page faults inside the timed steps
      auto engine = Engine::create(a);
      os << "decode throughput (" << engine->linear_format() << ", kv " << a.cache.kv_cache_dtype
         << ", prompt " << cfg.input_len << ", output " << cfg.output_len << ")\n"
         << "concurrency  decode tok/s  mean ITL ms\n";
      for (int64_t c : concurrency) {
        const ThroughputPoint pt = run_throughput(*engine, c, cfg);
        os << std::setw(11) << c << std::setw(14) << pt.decode_tokens_per_second
           << std::setw(13) << pt.mean_itl_ms << "\n";
        j["throughput"].push_back({{"concurrency", c},
                                   {"decode_tokens_per_second", pt.decode_tokens_per_second},
                                   {"mean_itl_ms", pt.mean_itl_ms}});
      }
    }
    if (!contexts.empty()) {
      const int64_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
      std::map<std::string, double> slopes;
      for (const std::string& dtype : split(cfg.kv_cache_dtypes)) {
        EngineArgs a = model_engine_args(cfg);
        a.cache.kv_cache_memory_bytes = cfg.kv_cache_memory_bytes;
        a.cache.gpu_memory_utilization = cfg.gpu_memory_utilization;
        a.cache.kv_cache_dtype = dtype;
        a.cache.calculate_kv_scales = true;
        a.prefault_kv_cache = true;
        auto engine = Engine::create(a);  // max_model_len = the model's; 1 GiB of KV
        // The largest context is capped so that context + decoded tokens fit the model.
        const int64_t cap = engine->max_model_len() - cfg.itl_tokens - 1;
        const std::vector<int32_t> long_prompt =
            random_ids(std::min(max_ctx, cap), engine->vocab_size(), 777);
        std::vector<double> x, y;
        os << "decode ITL vs context, kv " << dtype << "\ncontext  ITL ms\n";
        int idx = 0;
        for (int64_t ctx : contexts) {
          ctx = std::min(ctx, cap);
          const double itl = run_itl(*engine, long_prompt, ctx, cfg.itl_tokens, idx++);
          x.push_back(static_cast<double>(ctx) / 1000.0);
          y.push_back(itl);
          os << std::setw(7) << ctx << std::setw(8) << itl << "\n";
          j["itl"][dtype].push_back({{"context", ctx}, {"itl_ms", itl}});
        }
        slopes[dtype] = slope(x, y);
        os << "slope " << dtype << ": " << std::setprecision(4) << slopes[dtype]
           << " ms per 1K context tokens (least-squares line over " << x.size() << " points)\n"
           << std::setprecision(2);
        j["itl_slope_ms_per_1k"][dtype] = slopes[dtype];
      }
      if (slopes.count("bf16") && slopes.count("fp8_e4m3") && slopes["bf16"] > 0) {
        const double ratio = slopes["fp8_e4m3"] / slopes["bf16"];
        os << "fp8_e4m3 slope / bf16 slope = " << std::setprecision(3) << ratio
           << " (KV bytes ratio 0.5)\n";
        j["fp8_over_bf16_slope"] = ratio;
      }
    }
    if (cfg.json) std::cout << j.dump() << "\n";
  });
}

}  // namespace octet
