// The CPU rehearsal of the kernel count (kernels/launch_counter.h with launch_model.h's rules)
// against the real thing: the kernel nodes of the CUDA backend's batch-1 decode graph
// (Backend::graph_kernel_count), for stories260K on the FP32 and FP8 paths, through `bench
// latency`'s engine. A change of dispatch in cuda_backend_*.cu that launch_model.h does not
// follow fails here. Needs a GPU (exit 77 without one).
#include <catch2/catch.hpp>

#include <cstdio>

#include "engine/benchmarks.h"
#include "engine/engine.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

namespace octet {

TEST_CASE("cuda launch count: the decode graph's kernels equal the CPU rehearsal's",
          "[cuda][launch]") {
  testing::require_cuda_or_skip();
  for (const char* quantization : {"none", "fp8"}) {
    CAPTURE(quantization);
    int64_t kernels[2] = {-1, -1};
    for (int cuda = 0; cuda < 2; ++cuda) {
      EngineArgs args = latency_engine_args(testing::stories(), quantization, "channel", 8, 4);
      args.device = cuda ? "cuda" : "cpu";
      args.count_kernel_launches = true;
      auto engine = Engine::create(args);
      (void)bench_latency(*engine, 8, 4);
      kernels[cuda] = engine->decode_step_kernels();
    }
    std::printf("cuda launch count %s: graph %lld, rehearsal %lld\n", quantization,
                static_cast<long long>(kernels[1]), static_cast<long long>(kernels[0]));
    CHECK(kernels[0] > 0);
    CHECK(kernels[1] == kernels[0]);
  }
}

}  // namespace octet
