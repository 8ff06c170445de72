// --device (config/generate_config.h validate_device): one declaration shared by serve,
// generate, perplexity and the benches; unknown devices are errors naming the value.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "config/bench_config.h"
#include "config/engine_args.h"
#include "config/generate_config.h"

using namespace octet;

TEST_CASE("the device option accepts cpu, cuda, cuda:N and auto, auto is the default", "[config]") {
  for (const char* d : {"cpu", "cuda", "cuda:0", "cuda:12", "auto"}) CHECK_NOTHROW(validate_device(d));
  CHECK(EngineArgs{}.device == "auto");
  CHECK(GenerateConfig{}.device == "auto");
  CHECK(BenchLatencyConfig{}.device == "auto");
  CHECK(PerplexityConfig{}.device == "auto");
  CHECK(BenchEngineConfig{}.device == "auto");
}

TEST_CASE("the device option: an unknown device is a clear error naming it", "[config]") {
  for (const char* d : {"tpu", "gpu", "cuda:", "cuda:x", "CPU", ""}) {
    INFO(d);
    try {
      validate_device(d);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()) ==
            std::string("--device must be cpu, cuda, cuda:N or auto, got '") + d + "'");
    }
  }
  EngineArgs a;
  a.model = "m.gguf";
  a.device = "tpu";
  CHECK_THROWS_WITH(a.validate(), "--device must be cpu, cuda, cuda:N or auto, got 'tpu'");
}

TEST_CASE("bench latency: --num-iters-warmup defaults to 1, 0 allowed, out of range is an error",
          "[config]") {
  BenchLatencyConfig c;
  c.model = "m.gguf";
  CHECK(c.num_iters_warmup == 1);
  CHECK_NOTHROW(c.validate());
  c.num_iters_warmup = 0;
  CHECK_NOTHROW(c.validate());
  for (int64_t bad : {int64_t{-1}, int64_t{1001}}) {
    c.num_iters_warmup = bad;
    CHECK_THROWS_WITH(c.validate(), "--num-iters-warmup must be in [0, 1000], got " +
                                        std::to_string(bad));
  }
}
