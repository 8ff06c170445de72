// The options of --load-format dummy and of the KV memory budget (issue 11 items 4 and 7):
// --load-format, --tokenizer, --seed, --gpu-memory-utilization, --kv-cache-memory-bytes and
// bench latency's --max-model-len, on every command that loads a model; every rejected value
// names its flag, and a config file (octet serve --config) sets the same keys.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "config/bench_config.h"
#include "config/engine_args.h"
#include "config/generate_config.h"
#include "config/serve_config.h"

using namespace octet;
using Catch::Matchers::Contains;

namespace {

template <class Config>
std::set<std::string> keys() {
  Config c;
  std::set<std::string> out;
  Config::visit(c, [&](auto&, const char* key, const char*) { out.insert(key); });
  return out;
}

GenerateConfig generate() {
  GenerateConfig g;
  g.model = "tiny-llama";
  g.prompt = "hi";
  return g;
}

}  // namespace

TEST_CASE("every model-loading command has --load-format and --tokenizer", "[load_format]") {
  for (const auto& k : {keys<GenerateConfig>(), keys<BenchLatencyConfig>(),
                        keys<PerplexityConfig>(), keys<BenchEngineConfig>(), keys<ServeConfig>()}) {
    CHECK(k.count("load_format") == 1);
    CHECK(k.count("tokenizer") == 1);
  }
  for (const auto& k : {keys<GenerateConfig>(), keys<BenchLatencyConfig>(), keys<ServeConfig>(),
                        keys<BenchEngineConfig>()}) {
    CHECK(k.count("gpu_memory_utilization") == 1);
    CHECK(k.count("kv_cache_memory_bytes") == 1);
  }
  CHECK(keys<ServeConfig>().count("seed") == 1);
  CHECK(keys<BenchLatencyConfig>().count("seed") == 1);
  CHECK(keys<BenchLatencyConfig>().count("max_model_len") == 1);
  // Defaults: today's behaviour (files, 1 GiB of KV on the CPU).
  CHECK(EngineArgs{}.load_format == "auto");
  CHECK(EngineArgs{}.seed == -1);
  CHECK(CacheConfig{}.gpu_memory_utilization == 0.0);
  CHECK(CacheConfig{}.kv_cache_memory_bytes == 0);
}

TEST_CASE("load_format accepts auto and dummy only", "[load_format]") {
  GenerateConfig g = generate();
  for (const char* f : {"auto", "dummy"}) {
    g.load_format = f;
    CHECK_NOTHROW(g.validate());
  }
  for (const char* f : {"", "Dummy", "safetensors", "pt"}) {
    g.load_format = f;
    CHECK_THROWS_WITH(g.validate(), Contains("--load-format must be auto or dummy"));
  }
  EngineArgs a;
  a.model = "m";
  a.load_format = "random";
  CHECK_THROWS_WITH(a.validate(), Contains("--load-format"));
  a.load_format = "dummy";
  CHECK_NOTHROW(a.validate());
  a.seed = -2;
  CHECK_THROWS_WITH(a.validate(), Contains("--seed"));
  PerplexityConfig p;
  p.model = "m";
  p.text = "t";
  p.load_format = "x";
  CHECK_THROWS_WITH(p.validate(), Contains("--load-format"));
  BenchEngineConfig b;
  b.model = "m";
  b.load_format = "x";
  CHECK_THROWS_WITH(b.validate(), Contains("--load-format"));
}

TEST_CASE("gpu_memory_utilization must be in (0, 1) or 1, 0 the default", "[load_format]") {
  CacheConfig c;
  for (double f : {0.0, 1e-6, 0.5, 0.9, 1.0}) {
    c.gpu_memory_utilization = f;
    CHECK_NOTHROW(c.validate());
  }
  for (double f : {-0.1, -1.0, 1.0000001, 2.0, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    c.gpu_memory_utilization = f;
    CHECK_THROWS_WITH(c.validate(), Contains("--gpu-memory-utilization must be in (0, 1]"));
  }
  c.gpu_memory_utilization = 0.5;
  c.kv_cache_memory_bytes = -1;
  CHECK_THROWS_WITH(c.validate(), Contains("--kv-cache-memory-bytes"));
  // Every command that starts an engine checks them.
  GenerateConfig g = generate();
  g.cache.gpu_memory_utilization = 1.5;
  CHECK_THROWS_WITH(g.validate(), Contains("--gpu-memory-utilization"));
  BenchEngineConfig b;
  b.model = "m";
  b.gpu_memory_utilization = -0.5;
  CHECK_THROWS_WITH(b.validate(), Contains("--gpu-memory-utilization"));
  b.gpu_memory_utilization = 0.5;
  b.kv_cache_memory_bytes = -5;
  CHECK_THROWS_WITH(b.validate(), Contains("--kv-cache-memory-bytes"));
  BenchLatencyConfig l;
  l.model = "m";
  l.cache.gpu_memory_utilization = 7;
  CHECK_THROWS_WITH(l.validate(), Contains("--gpu-memory-utilization"));
}

TEST_CASE("bench latency: --max-model-len holds the run, --seed >= -1", "[load_format]") {
  BenchLatencyConfig l;
  l.model = "llama-3.1-8b";
  l.load_format = "dummy";
  l.input_len = 16;
  l.output_len = 1;
  CHECK_NOTHROW(l.validate());
  l.max_model_len = 18;  // 16 + 1 + 1
  CHECK_NOTHROW(l.validate());
  l.max_model_len = 4096;
  CHECK_NOTHROW(l.validate());
  l.max_model_len = 17;
  CHECK_THROWS_WITH(l.validate(), Contains("--max-model-len 17") && Contains("(18)"));
  l.max_model_len = 0;
  l.seed = -2;
  CHECK_THROWS_WITH(l.validate(), Contains("--seed"));
}

TEST_CASE("serve --config sets the dummy and memory keys", "[load_format]") {
  const std::string path = "/tmp/octet_load_format_" + std::to_string(getpid()) + ".yaml";
  {
    std::ofstream f(path);
    f << "load_format: dummy\nmodel: llama-3.1-8b\ntokenizer: /x/stories260K.gguf\nseed: 5\n"
         "gpu_memory_utilization: 0.75\nkv_cache_memory_bytes: 1048576\n";
  }
  ServeConfig s;
  s.apply_config_file(path);
  CHECK(s.engine.load_format == "dummy");
  CHECK(s.engine.model == "llama-3.1-8b");
  CHECK(s.engine.tokenizer == "/x/stories260K.gguf");
  CHECK(s.engine.seed == 5);
  CHECK(s.engine.cache.gpu_memory_utilization == 0.75);
  CHECK(s.engine.cache.kv_cache_memory_bytes == 1048576);
  CHECK_NOTHROW(s.validate());
  {
    std::ofstream f(path);
    f << "gpu_memory_utilization: lots\n";
  }
  ServeConfig bad;
  CHECK_THROWS_WITH(bad.apply_config_file(path), Contains("gpu_memory_utilization"));
  std::remove(path.c_str());
}

TEST_CASE("model_engine_args carries the load format, tokenizer and seed", "[load_format]") {
  GenerateConfig g = generate();
  g.load_format = "dummy";
  g.tokenizer = "tok.gguf";
  g.seed = 11;
  const EngineArgs a = model_engine_args(g);
  CHECK(a.load_format == "dummy");
  CHECK(a.tokenizer == "tok.gguf");
  CHECK(a.seed == 11);
  PerplexityConfig p;  // no seed: the default
  p.load_format = "dummy";
  CHECK(model_engine_args(p).seed == -1);
  CHECK(model_engine_args(p).load_format == "dummy");
}
