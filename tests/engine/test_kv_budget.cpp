// The KV budget from --gpu-memory-utilization and the CUDA graph reserve (engine/kv_budget.h),
// against figures worked out by hand; --enforce-eager (and a backend without graphs) reserves
// nothing; --kv-cache-memory-bytes overrides the fraction. Runs on the CPU: the CUDA graph
// reserve is a formula over the model's shape, checked here without a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/kv_budget.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "test_model_paths.h"

namespace octet {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30, kMiB = int64_t{1} << 20;

std::unique_ptr<LoadedModel> tiny_llama() {
  ModelSource s;
  s.model = "tiny-llama";  // hidden 64, 2 layers, 4 heads x 16, 2 KV heads, ffn 128, vocab 512
  s.load_format = "dummy";
  s.tokenizer = testing::stories();
  LoadOptions o = make_load_options("auto", "channel");
  o.device = "cpu";
  return load_model(s, o);
}

}  // namespace

TEST_CASE("kv budget: fraction x device - weights - activations - graph reserve", "[budget]") {
  KVBudgetInputs in;
  in.device_memory_bytes = 80 * kGiB;
  in.gpu_memory_utilization = 0.9;  // 0.9 x 80 GiB = 72 GiB = 77309411328 bytes
  in.weights_bytes = 8 * kGiB;
  in.activation_bytes = 1 * kGiB;
  in.graph_reserve_bytes = 512 * kMiB;
  // 77309411328 - 8589934592 - 1073741824 - 536870912
  CHECK(kv_budget_bytes(in) == int64_t{67108864000});
  in.graph_reserve_bytes = 0;  // --enforce-eager: the 512 MiB go back to the KV cache
  CHECK(kv_budget_bytes(in) == int64_t{67645734912});
  // floor(0.5 x 1001) = 500; 500 - 400 - 50 - 60 = -10: nothing left, reported negative.
  KVBudgetInputs small;
  small.device_memory_bytes = 1001;
  small.gpu_memory_utilization = 0.5;
  small.weights_bytes = 400;
  small.activation_bytes = 50;
  small.graph_reserve_bytes = 60;
  CHECK(kv_budget_bytes(small) == -10);
}

TEST_CASE("kv budget: graph sizes follow vLLM's ladder; eager or no graphs capture none",
          "[budget]") {
  CHECK(captured_graph_sizes(false, true, 8) == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(captured_graph_sizes(false, true, 20) == std::vector<int64_t>{1, 2, 4, 8, 16});
  CHECK(captured_graph_sizes(false, true, 256).size() == 35);   // 1, 2, 4, 8 .. 256 by 8
  CHECK(captured_graph_sizes(false, true, 1024).size() == 67);  // capped at 512
  CHECK(captured_graph_sizes(true, true, 256).empty());         // --enforce-eager
  CHECK(captured_graph_sizes(false, false, 256).empty());       // the CPU: no graphs
}

TEST_CASE("kv budget: the graph reserve, term by term, for a hand-made shape", "[budget]") {
  GraphMemoryShape s;
  s.sizes = {1, 2, 4, 8};
  s.activation_bytes = 1000;
  s.max_model_len = 1000;  // 63 blocks of 16 = 1008 positions = 2 partitions of 512
  s.block_size = 16;
  s.num_heads = 4;
  s.head_dim = 8;
  s.num_windows = 2;
  s.fp8_linears = {{64, 2}, {100, 2}};
  const GraphMemoryReserve r = estimate_graph_memory(s);
  CHECK(r.activations == 1000);
  CHECK(r.batch == 44 * 8 + 8 + 4 * 8 * 63);  // 2376
  // Plans: 2 windows x 4 x (2 + 5 x 2p + 3p), summed over p = 1, 2, 4, 8 (sum 15): 1624.
  // Partials: 4 x 2p x 4 heads x (8 + 2), summed: 320 x 15 = 4800.
  CHECK(r.attention == 1624 + 4800);
  // Needs 4 x 2 groups x round64(p x n) for n = 64 then 100; each new maximum is allocated:
  // p=1: 512, 1024 (both); p=2: 1024 (not above 1024), 2048; p=4: 2048 (no), 3584;
  // p=8: 4096, 6656.
  CHECK(r.gemm_scratch == 512 + 1024 + 2048 + 3584 + 4096 + 6656);  // 17920
  CHECK(r.graph_exec == 4 * kGraphExecBytesEstimate);
  CHECK(r.total() == 1000 + 2376 + 6424 + 17920 + 4 * (int64_t{4} << 20));

  // No sizes (--enforce-eager): nothing at all.
  s.sizes.clear();
  CHECK(estimate_graph_memory(s).total() == 0);
  // A bad shape is refused rather than reserving nonsense.
  s.sizes = {1};
  s.block_size = 0;
  CHECK_THROWS_WITH(estimate_graph_memory(s), Catch::Contains("block_size must be positive"));
}

TEST_CASE("kv budget: the shape of tiny-llama's graphs, and its reserve by hand", "[budget]") {
  const auto m = tiny_llama();
  const GraphMemoryShape s =
      graph_memory_shape(*m->model, captured_graph_sizes(false, true, 8), 1024, 16);
  CHECK(s.sizes == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(s.num_heads == 4);
  CHECK(s.head_dim == 16);
  CHECK(s.num_windows == 1);
  // Per layer q 64, k 32, v 32, o 64 rows in G = 4 k parts, gate 128, up 128, down 64 in
  // 4 parts; the lm_head is BF16 (no FP8 scratch).
  using Linears = std::vector<std::pair<int64_t, int64_t>>;
  const Linears layer = {{64, 1}, {32, 1}, {32, 1}, {64, 4}, {128, 1}, {128, 1}, {64, 4}};
  Linears both = layer;
  both.insert(both.end(), layer.begin(), layer.end());
  CHECK(s.fp8_linears == both);
  // Activations for 8 tokens and 8 rows: FP32 x, xn, q, attn, proj (64 each), k, v (32),
  // gate, up (128) = 640 floats a token; qa 128 B a token; a_scale 4 B; last 64 floats and
  // logits 512 floats a row.
  CHECK(s.activation_bytes == 8 * (640 * 4 + 128 + 4) + 8 * (64 + 512) * 4);  // 39968
  const GraphMemoryReserve r = estimate_graph_memory(s);
  CHECK(r.batch == 44 * 8 + 8 + 4 * 8 * 64);                  // 64 blocks of 16
  CHECK(r.attention == 4 * (4 * 2 + 13 * 15) + 576 * 15);     // 2 partitions, 4 heads x 18
  // Needs 4 x g x round64(p x n): at p = 1 q needs 256 (allocated), o 4 x 4 x 64 = 1024
  // (allocated), gate 512 (no); at p = 2, 4, 8 only o's 2048, 4096, 8192 exceed the maximum.
  CHECK(r.gemm_scratch == 256 + 1024 + 2048 + 4096 + 8192);  // 15616
  CHECK(r.total() == 39968 + 2408 + 9452 + 15616 + 4 * kGraphExecBytesEstimate);
  // --enforce-eager: no sizes, no reserve.
  CHECK(estimate_graph_memory(graph_memory_shape(*m->model, captured_graph_sizes(true, true, 8),
                                                 1024, 16))
            .total() == 0);
}

TEST_CASE("kv budget: on the CPU setup_kv_cache reserves no graphs and prints none",
          "[budget]") {
  const auto m = tiny_llama();
  CacheConfig cache;
  cache.kv_cache_dtype = "fp8_e4m3";
  SchedulerConfig sched;
  sched.max_model_len = 256;
  sched.max_num_batched_tokens = 256;
  sched.max_num_seqs = 8;
  const double device = static_cast<double>(m->host_memory_available_bytes);
  cache.gpu_memory_utilization = (64.0 * kMiB + 2e6) / device;
  const KVCacheSetup with = setup_kv_cache(cache, sched, *m, /*cuda_graphs=*/true);
  const KVCacheSetup eager = setup_kv_cache(cache, sched, *m, /*cuda_graphs=*/false);
  CHECK_FALSE(with.memory.graphs_supported);
  CHECK(with.memory.graph_reserve_bytes == 0);
  CHECK(with.budget_bytes == eager.budget_bytes);
  CHECK(with.memory.line.find("CUDA graphs") == std::string::npos);
  CHECK(with.memory.budget_source.find("CUDA graphs") == std::string::npos);
  // The budget is kv_budget_bytes' figure rounded down to whole blocks.
  KVBudgetInputs in;
  in.device_memory_bytes = with.memory.device_memory_bytes;
  in.gpu_memory_utilization = cache.gpu_memory_utilization;
  in.weights_bytes = with.memory.weights_bytes;
  in.activation_bytes = with.memory.activation_bytes;
  const int64_t left = kv_budget_bytes(in);
  CHECK(with.budget_bytes == left / with.bytes_per_block * with.bytes_per_block);
  // --kv-cache-memory-bytes overrides the fraction (vLLM's precedence).
  cache.kv_cache_memory_bytes = 2 * kMiB;
  const KVCacheSetup fixed = setup_kv_cache(cache, sched, *m, true);
  CHECK(fixed.budget_bytes == 2 * kMiB);
  CHECK(fixed.memory.budget_source == "--kv-cache-memory-bytes");
}

}  // namespace octet
