// The KV budget (engine/kv_budget.h): the CPU's fraction rule, the CUDA graph pool estimate,
// the device rule from measured free memory with the workspace reserved before the KV pool,
// on a fake device of given size (a Backend reporting total / free memory) and on
// Llama-3.1-8B's shapes at --gpu-memory-utilization 0.95 and --max-num-batched-tokens 16384 on
// an 80 GiB device, against figures worked out by hand. Runs on the CPU; the CUDA backend's
// sizing functions (plain arithmetic) are checked too where octet is built with CUDA.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/kv_budget.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "kernels/forwarding_backend.h"
#include "test_model_paths.h"
#if defined(OCTET_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace octet {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30, kMiB = int64_t{1} << 20;

std::unique_ptr<LoadedModel> tiny_llama(std::shared_ptr<Backend> backend = nullptr) {
  ModelSource s;
  s.model = "tiny-llama";  // hidden 64, 2 layers, 4 heads x 16, 2 KV heads, ffn 128, vocab 512
  s.load_format = "dummy";
  s.tokenizer = testing::stories();
  LoadOptions o = make_load_options("auto", "channel");
  o.device = "cpu";
  o.backend = std::move(backend);
  return load_model(s, o);
}

// A device of `total` bytes over the CPU backend: it counts the bytes of its live buffers,
// reports free = total - context - live - reserved workspace, and reserves a fixed workspace
// (recording the shape it was asked for). Graphs are "supported" (the estimate is made).
class FakeDevice final : public ForwardingBackend {
 public:
  FakeDevice(int64_t total, int64_t context)
      : ForwardingBackend(std::shared_ptr<Backend>(make_backend("cpu"))), total_(total),
        context_(context) {}
  std::string name() const override { return "fake-gpu:0"; }
  bool supports_graphs() const override { return true; }
  DeviceMemoryInfo memory_info() const override {
    return {total_ - context_ - *live_ - reserved_.total(), total_};
  }
  Buffer allocate(int64_t bytes) override {
    Buffer b = inner().allocate(bytes);
    *live_ += bytes;
    auto holder = std::make_shared<Buffer>(b);
    std::shared_ptr<std::atomic<int64_t>> live = live_;
    return Buffer(std::shared_ptr<void>(b.data(), [holder, live, bytes](void*) {
                    *live -= bytes;
                  }),
                  bytes);
  }
  WorkspaceBytes workspace_bytes(const WorkspaceShape&) const override {
    return {3 * kMiB, 2 * kMiB, 64 * 1024};
  }
  // As the CUDA backend: frees the old reservation, std::bad_alloc when the new one does not
  // fit the free memory.
  WorkspaceBytes reserve_workspace(const WorkspaceShape& shape) override {
    shape_ = shape;
    ++reserves_;
    reserved_ = {};
    const WorkspaceBytes want = workspace_bytes(shape);
    if (want.total() > memory_info().free_bytes) throw std::bad_alloc();
    reserved_ = want;
    return reserved_;
  }
  int64_t live() const { return *live_; }
  const WorkspaceShape& shape() const { return shape_; }
  int reserves() const { return reserves_; }

 private:
  int64_t total_, context_;
  std::shared_ptr<std::atomic<int64_t>> live_ = std::make_shared<std::atomic<int64_t>>(0);
  WorkspaceBytes reserved_;
  WorkspaceShape shape_;
  int reserves_ = 0;
};

}  // namespace

TEST_CASE("kv budget: the CPU's fraction x memory - weights - activations - graphs",
          "[budget]") {
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

TEST_CASE("kv budget: graph sizes follow vLLM's ladder, eager or no graphs capture none",
          "[budget]") {
  CHECK(captured_graph_sizes(false, true, 8) == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(captured_graph_sizes(false, true, 20) == std::vector<int64_t>{1, 2, 4, 8, 16});
  CHECK(captured_graph_sizes(false, true, 256).size() == 35);   // 1, 2, 4, 8 .. 256 by 8
  CHECK(captured_graph_sizes(false, true, 1024).size() == 67);  // capped at 512
  CHECK(captured_graph_sizes(true, true, 256).empty());         // --enforce-eager
  CHECK(captured_graph_sizes(false, false, 256).empty());       // the CPU: no graphs
}

TEST_CASE("kv budget: the graph pool estimate, term by term, for a hand-made shape",
          "[budget]") {
  GraphMemoryShape s;
  s.sizes = {1, 2, 4, 8};
  s.activation_bytes = 1000;
  s.max_model_len = 1000;  // 63 blocks of 16 = 1008 positions = 2 partitions of 512
  s.block_size = 16;
  s.num_windows = 2;
  const GraphMemoryReserve r = estimate_graph_memory(s);
  CHECK(r.activations == 1000);
  CHECK(r.batch == 44 * 8 + 8 + 4 * 8 * 63);  // 2376
  // Plans only (the partials are the workspace's): 2 windows x 4 x (2 + 5 x 2p + 3p) summed
  // over p = 1, 2, 4, 8 (sum 15): 8 x (4 x 2 + 13 x 15) = 1624.
  CHECK(r.attention == 1624);
  CHECK(r.graph_exec == 4 * kGraphExecBytesEstimate);
  CHECK(r.total() == 1000 + 2376 + 1624 + 4 * (int64_t{4} << 20));
  // No sizes (--enforce-eager): nothing at all.
  s.sizes.clear();
  CHECK(estimate_graph_memory(s).total() == 0);
  // A bad shape is refused rather than reserving nonsense.
  s.sizes = {1};
  s.block_size = 0;
  CHECK_THROWS_WITH(estimate_graph_memory(s), Catch::Contains("block_size must be positive"));
}

TEST_CASE("kv budget: tiny-llama's graph estimate and workspace shape by hand", "[budget]") {
  const auto m = tiny_llama();
  const GraphMemoryShape s =
      graph_memory_shape(*m->model, captured_graph_sizes(false, true, 8), 1024, 16);
  CHECK(s.sizes == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(s.num_windows == 1);
  // Activations for 8 tokens and 8 rows: FP32 x, xn, q, attn, proj (64 each), k, v (32),
  // gate, up (128) = 640 floats a token; qa 128 B a token; a_scale 4 B; last 64 floats,
  // logits 512 floats and one int32 greedy id a row.
  CHECK(s.activation_bytes == 8 * (640 * 4 + 128 + 4) + 8 * (64 + 512 + 1) * 4);  // 40000
  const GraphMemoryReserve r = estimate_graph_memory(s);
  CHECK(r.batch == 44 * 8 + 8 + 4 * 8 * 64);  // 64 blocks of 16
  CHECK(r.attention == 4 * (4 * 2 + 13 * 15));  // 2 partitions, one window
  CHECK(r.total() == 40000 + 2408 + 812 + 4 * kGraphExecBytesEstimate);
  CHECK(estimate_graph_memory(graph_memory_shape(*m->model, captured_graph_sizes(true, true, 8),
                                                 1024, 16))
            .total() == 0);

  // Per layer q 64 x 64, k and v 32 x 64, o 64 x 64 in G = 4 k parts, gate and up 128 x 64,
  // down 64 x 128 in 4 parts; then the lm_head, BF16 512 x 64 (listed as bf16). The CPU
  // stores no merged projections.
  const WorkspaceShape w = workspace_shape(*m->model, 256, 8, 1024, 16, 8);
  CHECK(w.max_num_batched_tokens == 256);
  CHECK(w.max_num_seqs == 8);
  CHECK(w.max_model_len == 1024);
  CHECK(w.block_size == 16);
  CHECK(w.num_heads == 4);
  CHECK(w.head_dim == 16);
  CHECK(w.max_graph_seqs == 8);
  const std::vector<std::vector<int64_t>> layer = {{64, 64, 1},  {32, 64, 1},  {32, 64, 1},
                                                   {64, 64, 4},  {128, 64, 1}, {128, 64, 1},
                                                   {64, 128, 4}};
  REQUIRE(w.fp8_linears.size() == 15);
  for (size_t i = 0; i < 14; ++i) {
    INFO("linear " << i);
    CHECK(w.fp8_linears[i].n == layer[i % 7][0]);
    CHECK(w.fp8_linears[i].k == layer[i % 7][1]);
    CHECK(w.fp8_linears[i].k_groups == layer[i % 7][2]);
    CHECK_FALSE(w.fp8_linears[i].merged);
    CHECK_FALSE(w.fp8_linears[i].bf16);
  }
  CHECK(w.fp8_linears[14].n == 512);
  CHECK(w.fp8_linears[14].k == 64);
  CHECK(w.fp8_linears[14].bf16);
}

TEST_CASE("kv budget: the device rule: free - (total - cap) - activations - graph pools",
          "[budget]") {
  DeviceMemoryParts p;
  p.total_bytes = 1000000;
  p.gpu_memory_utilization = 0.9;  // cap 900000: 100000 stay free
  p.weights_bytes = 200000;
  p.workspace = {30000, 20000, 1000};  // 51000
  p.free_bytes = 1000000 - 200000 - 51000 - 40000;  // the context and others hold 40000
  p.activation_bytes = 50000;
  p.graph_pool_bytes = 9000;
  const DeviceMemoryBudget b = device_kv_budget(p);
  CHECK(b.cap_bytes == 900000);
  CHECK(b.context_other_bytes == 40000);
  // 709000 free - 100000 kept free - 50000 - 9000.
  CHECK(b.kv_budget_bytes == 550000);
  // Every part octet will hold sums to the cap.
  CHECK(b.context_other_bytes + p.weights_bytes + p.workspace.total() + p.activation_bytes +
            p.graph_pool_bytes + b.kv_budget_bytes ==
        b.cap_bytes);
  // Another process holding 600000 more: nothing left (negative: the caller refuses).
  p.free_bytes -= 600000;
  CHECK(device_kv_budget(p).kv_budget_bytes == -50000);
  CHECK(device_kv_budget(p).context_other_bytes == 640000);
}

TEST_CASE("kv budget: Llama-3.1-8B FP8 at 0.95 and 16384 batched tokens on an 80 GiB device "
          "fits with every part counted",
          "[budget]") {
  // Llama-3.1-8B: hidden 4096, 32 layers, 32 heads x 128, 8 KV heads, ffn 14336, vocab 128256,
  // FP8 linears with per-channel scales, BF16 embeddings and lm_head, G = 32 k parts for
  // o_proj / down_proj (lcm of the TP sizes 2..32 the shapes allow). --max-model-len 131072,
  // --max-num-seqs 256, block 16, fp8_e4m3 KV, CUDA graphs on. Every figure below is by hand.
  const int64_t total = 80 * kGiB;
  const int64_t linear_fp8 = 4096 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336) + 4096 * 14336;
  const int64_t scales = 4 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096);
  const int64_t weights =
      32 * (linear_fp8 + scales + 2 * 4096 * 4) + 2 * (int64_t{128256} * 4096 * 2) + 4096 * 4;
  CHECK(weights == 9087238144);  // 8.46 GiB
  // Activations a token: x, xn, q, attn, proj (4096), k, v (1024), gate, up (14336) FP32 =
  // 51200 floats; qa 14336 B; a_scale 4 B. A logits row: last 4096 + logits 128256 floats and
  // a greedy id (int32).
  const int64_t per_token = 51200 * 4 + 14336 + 4, per_row = (4096 + 128256 + 1) * 4;
  const int64_t activations = 16384 * per_token + 256 * per_row;
  CHECK(activations == 3725919232);  // 3.47 GiB
  // Workspace (CUDA, sm_90): GEMM scratch for min(512, 16384) rows of the widest stacked GEMM,
  // the merged gate/up (2 x 14336 outputs): 512 x 28672 floats = 56 MiB (each other FP8 linear
  // writes its sums straight to its output; the BF16 lm_head's activations, 512 x 4096
  // halves, are smaller). Attention, P = 131072 / 512 = 256
  // partitions a row: partials for the larger of the eager 8192 slots and the 256-sequence
  // graph's 256 x 256 slots, 32 heads x (128 + 2) floats each; the eager plan for
  // min(16384, 7 x 256) = 1792 decode rows x 256 items, 1792 merges and 16384 / 16 +
  // min(256, 16384 / 8) + 1 = 1281 prefill tiles. FlashInfer prefill (sm_90): 16-bit q and
  // output of 16384 rows x 32 heads x 128, 2 bytes each = 256 MiB.
  WorkspaceBytes ws;
  ws.gemm_scratch = 4 * 512 * 28672;
  ws.attention_partials = int64_t{4} * 256 * 256 * 32 * 130;
  ws.attention_plan = 4 * (5 * 1792 * 256 + 3 * 1792 + 4 * 1281);
  CHECK(ws.attention_partials == 1090519040);  // 1.02 GiB, one buffer for every graph size
  CHECK(ws.attention_plan == 9217040);
  ws.attention_prefill = 2 * 2 * int64_t{16384} * 32 * 128;
  CHECK(ws.attention_prefill == 268435456);
#if defined(OCTET_HAVE_CUDA)
  {
    // The CUDA backend's own sizing agrees (plain arithmetic, no GPU needed).
    WorkspaceShape shape;
    shape.max_num_batched_tokens = 16384;
    shape.max_num_seqs = 256;
    shape.max_model_len = 131072;
    shape.block_size = 16;
    shape.num_heads = 32;
    shape.head_dim = 128;
    shape.max_graph_seqs = 256;
    for (int l = 0; l < 32; ++l)
      for (const WorkspaceShape::Linear& lin :
           {WorkspaceShape::Linear{4096, 4096, 1}, WorkspaceShape::Linear{1024, 4096, 1},
            WorkspaceShape::Linear{1024, 4096, 1}, WorkspaceShape::Linear{4096, 4096, 32},
            WorkspaceShape::Linear{14336, 4096, 1}, WorkspaceShape::Linear{14336, 4096, 1},
            WorkspaceShape::Linear{4096, 14336, 32}, WorkspaceShape::Linear{6144, 4096, 1, true},
            WorkspaceShape::Linear{28672, 4096, 1, true}})
        shape.fp8_linears.push_back(lin);
    shape.fp8_linears.push_back({128256, 4096, 1, false, /*bf16=*/true});
    const WorkspaceBytes cuda = cuda_workspace_bytes(shape, /*has_fp8=*/true);
    CHECK(cuda.gemm_scratch == ws.gemm_scratch);
    CHECK(cuda.attention_partials == ws.attention_partials);
    CHECK(cuda.attention_plan == ws.attention_plan);
    CHECK(cuda.attention_prefill == ws.attention_prefill);
    // Every unmerged FP8 linear at the largest step runs in one piece: no scratch to outgrow;
    // the stacked GEMMs and the lm_head run in pieces of at least 512 rows.
    for (const WorkspaceShape::Linear& lin : shape.fp8_linears) {
      if (lin.merged) {
        CHECK(cuda.gemm_scratch / 4 / lin.n >= 512);
      } else if (lin.bf16) {
        CHECK(cuda.gemm_scratch / 4 / cuda_bf16_scratch_floats(1, lin.k) >= 512);
      } else {
        CHECK(cuda_gemm_chunk_rows(cuda.gemm_scratch / 4, 16384, lin.n, lin.k, 1, true) ==
              16384);
        CHECK(cuda_gemm_scratch_floats(16384, lin.n, lin.k, 1, true) == 0);
      }
    }
    // sm_80 (W8A16): the BF16 copies of the widest weight and 512 rows of activations,
    // down_proj's 4096 x 14336 and 512 x 14336 halves.
    CHECK(cuda_workspace_bytes(shape, /*has_fp8=*/false).gemm_scratch ==
          2 * (4096 + 512) * int64_t{14336});
  }
#endif
  // Graph pools: 35 sizes up to 256; graph activations for 256 tokens and rows, batch arrays
  // 8192 blocks wide, each size's plans (sum of the sizes 4231), 4 MiB per executable.
  GraphMemoryShape gs;
  gs.sizes = captured_graph_sizes(false, true, 256);
  gs.activation_bytes = 256 * per_token + 256 * per_row;
  gs.max_model_len = 131072;
  gs.block_size = 16;
  const int64_t graphs = estimate_graph_memory(gs).total();
  CHECK(graphs == 191629312 + (44 * 256 + 8 + 4 * 256 * 8192) + 4 * (35 * 2 + 1283 * 4231) +
                      35 * kGraphExecBytesEstimate);

  DeviceMemoryParts p;
  p.total_bytes = total;
  p.gpu_memory_utilization = 0.95;
  p.weights_bytes = weights;
  p.workspace = ws;
  const int64_t context = 1 * kGiB;  // the CUDA context, cuBLASLt's workspace, ...
  p.free_bytes = total - context - weights - ws.total();
  p.activation_bytes = activations;
  p.graph_pool_bytes = graphs;
  const DeviceMemoryBudget b = device_kv_budget(p);
  CHECK(b.cap_bytes == 81604378624);  // floor(0.95 x 80 GiB)
  CHECK(b.context_other_bytes == context);
  const int64_t parts =
      context + weights + ws.total() + activations + graphs;  // all but the KV pool
  CHECK(b.kv_budget_bytes == b.cap_bytes - parts);
  // It fits: the KV budget holds sequences of 131072 tokens at 64 KiB a token (fp8: 2 x 32
  // layers x 8 heads x 128), and everything sums to at most 0.95 x total.
  const int64_t per_seq = int64_t{131072} * 2 * 32 * 8 * 128;
  CHECK(b.kv_budget_bytes / per_seq == 7);
  CHECK(parts + b.kv_budget_bytes <= b.cap_bytes);
  // The old accounting would have been caught by that sum: it subtracted neither the
  // context, nor the workspace, and the eager GEMM scratch then grew to 8 GiB mid-serve on
  // top of a pool sized from the total (old budget = cap - weights - activations - graphs
  // without workspace or context).
  const int64_t old_kv = b.cap_bytes - weights - activations - graphs;
  const int64_t old_allocated = context + weights + activations + graphs + old_kv + 8 * kGiB;
  CHECK(old_allocated > total);  // bad_alloc mid-serve, not a start-up error
}

#if defined(OCTET_HAVE_CUDA)
TEST_CASE("kv budget: the CUDA GEMM scratch of a call and the rows of one piece, by hand",
          "[budget]") {
  // FP8 tensor cores: the sums go straight to the output, no scratch, any rows in one piece.
  CHECK(cuda_gemm_scratch_floats(8, 64, 128, 2, true) == 0);
  CHECK(cuda_gemm_scratch_floats(16384, 4096, 14336, 1, true) == 0);
  CHECK(cuda_gemm_chunk_rows(0, 100, 64, 128, 2, true) == 100);
  // W8A16: the BF16 copies of one part's weight (64 x 64) and activations (m x 64), halves
  // of 8-element multiples; (63 x 64 + 3 x 64) / 2 for n = 63, m = 3 (4032 and 192 elements).
  CHECK(cuda_gemm_scratch_floats(8, 64, 128, 2, false) == (4096 + 512) / 2);
  CHECK(cuda_gemm_scratch_floats(3, 63, 128, 2, false) == (4032 + 192) / 2);
  CHECK(cuda_gemm_scratch_floats(1, 3, 5, 1, false) == (16 + 8) / 2);  // 15 -> 16, 5 -> 8
  CHECK(cuda_gemm_chunk_rows(2304, 100, 64, 128, 2, false) == 8);
  CHECK(cuda_gemm_chunk_rows(2335, 100, 64, 128, 2, false) == 8);
  CHECK(cuda_gemm_chunk_rows(2336, 100, 64, 128, 2, false) == 9);
  CHECK(cuda_gemm_chunk_rows(1 << 20, 100, 64, 128, 2, false) == 100);  // all of it
  CHECK(cuda_gemm_chunk_rows(2048, 100, 64, 128, 2, false) == 0);  // not one row: refused
  // The reservation (W8A16): rows min(512, max(tokens, seqs, graph seqs)) of the widest
  // linear, sized for one GEMM over all of k (linear_w8a8 ignores k parts on CUDA).
  WorkspaceShape s;
  s.max_num_batched_tokens = 8;
  s.max_num_seqs = 2;
  s.fp8_linears = {{64, 128, 2}, {200, 64, 1}};  // (8192 + 1024) / 2 vs (12800 + 512) / 2
  CHECK(cuda_workspace_bytes(s, false).gemm_scratch == 4 * 6656);
  CHECK(cuda_workspace_bytes(s, true).gemm_scratch == 0);
  CHECK(cuda_workspace_bytes(s, true).attention_partials == 0);  // no heads given
  // Merged projections (FP8 devices) hold their stacked sums, rows x n; a BF16 linear its
  // activations as BF16, rows x k halves in 16-byte rounds.
  CHECK(cuda_merged_scratch_floats(8, 344) == 2752);
  CHECK(cuda_bf16_scratch_floats(3, 5) == 8);  // 15 halves -> 16 -> 8 floats
  CHECK(cuda_bf16_scratch_floats(512, 4096) == 512 * 2048);
  WorkspaceShape merged = s;
  merged.fp8_linears.push_back({344, 64, 1, /*merged=*/true});
  CHECK(cuda_workspace_bytes(merged, true).gemm_scratch == 4 * 8 * 344);
  CHECK(cuda_workspace_bytes(merged, false).gemm_scratch == 4 * 6656);  // W8A16 merges none
  merged.fp8_linears.push_back({512, 4000, 1, false, /*bf16=*/true});
  CHECK(cuda_workspace_bytes(merged, true).gemm_scratch == 4 * 8 * 2000);
  s.max_num_batched_tokens = 100000;  // capped at 512 rows: (12800 + 32768) / 2 vs
                                      // (8192 + 65536) / 2
  CHECK(cuda_workspace_bytes(s, false).gemm_scratch == 4 * 36864);
}
#endif

TEST_CASE("kv budget: a fake device: the workspace is reserved before the pool, the budget "
          "counts every part and the log line lists them",
          "[budget]") {
  auto fake = std::make_shared<FakeDevice>(int64_t{256} * kMiB, 40 * kMiB);
  const auto m = tiny_llama(fake);
  const int64_t weights = model_weight_bytes(*m->model);
  // The model holds one buffer beyond its weights: RoPE's inv_freq, 8 floats (head_dim 16).
  // The rule does not need to know it: the measured free memory counts it as context/other.
  const int64_t extra = 8 * 4;
  CHECK(fake->live() == weights + extra);
  CacheConfig cache;
  cache.kv_cache_dtype = "fp8_e4m3";
  cache.gpu_memory_utilization = 0.9;
  SchedulerConfig sched;
  sched.max_model_len = 1024;
  sched.max_num_batched_tokens = 256;
  sched.max_num_seqs = 8;
  const KVCacheSetup s = setup_kv_cache(cache, sched, *m, /*cuda_graphs=*/true);
  // reserve_workspace got this rank's limits and graphs.
  CHECK(fake->reserves() == 1);
  CHECK(fake->shape().max_num_batched_tokens == 256);
  CHECK(fake->shape().max_num_seqs == 8);
  CHECK(fake->shape().max_model_len == 1024);
  CHECK(fake->shape().max_graph_seqs == 8);
  CHECK(fake->shape().fp8_linears.size() == 15);  // 14 FP8 and the BF16 lm_head
  const MemoryFigures& mem = s.memory;
  CHECK(mem.on_device);
  CHECK(mem.workspace.total() == 5 * kMiB + 64 * 1024);
  CHECK(mem.context_other_bytes == 40 * kMiB + extra);
  // By hand: free = 256 MiB - 40 MiB - weights - workspace; cap = 0.9 x 256 MiB; KV =
  // free - (256 MiB - cap) - activations (256 tokens, 8 rows) - the graph estimate (sizes 1, 2,
  // 4, 8, as the tiny-llama case above: 40000 + 2408 + 812 + 4 x 4 MiB).
  const int64_t total = 256 * kMiB;
  const int64_t cap = static_cast<int64_t>(std::floor(0.9 * static_cast<double>(total)));
  const int64_t act = 256 * (640 * 4 + 128 + 4) + 8 * (64 + 512 + 1) * 4;
  const int64_t graphs = 40000 + 2408 + 812 + 4 * kGraphExecBytesEstimate;
  CHECK(mem.activation_bytes == act);
  CHECK(mem.graph_reserve_bytes == graphs);
  const int64_t free_now = total - 40 * kMiB - weights - extra - mem.workspace.total();
  const int64_t kv = free_now - (total - cap) - act - graphs;
  CHECK(s.budget_bytes == kv / s.bytes_per_block * s.bytes_per_block);
  // Every part, the pool and its null block included, stays within the cap.
  CHECK(40 * kMiB + extra + weights + mem.workspace.total() + act + graphs + mem.kv_pool_bytes <=
        cap + s.bytes_per_block);
  CHECK(mem.kv_pool_bytes == (s.num_usable_blocks + 1) * s.bytes_per_block);
  CHECK(mem.free_left_bytes == free_now - act - graphs - mem.kv_pool_bytes);
  for (const char* part : {"memory per GPU: total 256.0 MiB, cap 230.4 MiB (0.9); weights ",
                           ", activations ", ", GEMM scratch 3.0 MiB, attention partials 2.0 MiB, "
                           "attention plan 64.0 KiB, CUDA graphs ", "(4 decode sizes, estimate), "
                           "context/other 40.0 MiB, KV pool ", ", free left ",
                           "KV budget ", "(--gpu-memory-utilization 0.9 x 256.0 MiB - every "
                           "other part)", "sequences of 1024 tokens fit in the KV budget"}) {
    INFO(part);
    CHECK(mem.line.find(part) != std::string::npos);
  }
  // --kv-cache-memory-bytes overrides the fraction; the workspace is still reserved.
  CacheConfig fixed = cache;
  fixed.kv_cache_memory_bytes = 2 * kMiB;
  const KVCacheSetup f = setup_kv_cache(fixed, sched, *m, true);
  CHECK(f.budget_bytes == 2 * kMiB);
  CHECK(fake->reserves() == 2);
  CHECK(f.memory.budget_source == "--kv-cache-memory-bytes");
  // One that does not fit the device's free memory is refused at start-up.
  fixed.kv_cache_memory_bytes = 200 * kMiB;
  CHECK_THROWS_WITH(setup_kv_cache(fixed, sched, *m, true),
                    Catch::Contains("of device memory left after the weights, workspace, "
                                    "activations and CUDA graphs") &&
                        Catch::Contains("GEMM scratch 3.0 MiB"));
}

TEST_CASE("kv budget: a fake device too small is refused at start-up with every part",
          "[budget]") {
  // 64 MiB, of which the context holds 40: 0.9 leaves (57.6 - 40 - weights - workspace -
  // activations - graphs) < 0 for the KV cache.
  auto fake = std::make_shared<FakeDevice>(64 * kMiB, 40 * kMiB);
  const auto m = tiny_llama(fake);
  CacheConfig cache;
  cache.kv_cache_dtype = "fp8_e4m3";
  cache.gpu_memory_utilization = 0.9;
  SchedulerConfig sched;
  sched.max_model_len = 1024;
  sched.max_num_batched_tokens = 256;
  sched.max_num_seqs = 8;
  CHECK_THROWS_WITH(
      setup_kv_cache(cache, sched, *m, true),
      Catch::Contains("--gpu-memory-utilization 0.900000 leaves -") &&
          Catch::Contains("less than one sequence of max_model_len 1024 tokens") &&
          Catch::Contains("total 64.0 MiB, cap 57.6 MiB (0.9); weights ") &&
          Catch::Contains("GEMM scratch 3.0 MiB, attention partials 2.0 MiB") &&
          Catch::Contains("CUDA graphs ") && Catch::Contains("context/other 40.0 MiB") &&
          Catch::Contains("pass --enforce-eager"));
}

TEST_CASE("kv budget: a workspace larger than the free memory is refused with its parts",
          "[budget]") {
  // 44 MiB, the context holds 40: 3.7 MiB free after the weights for a workspace of 5.1 MiB.
  auto fake = std::make_shared<FakeDevice>(44 * kMiB, 40 * kMiB);
  const auto m = tiny_llama(fake);
  CacheConfig cache;
  cache.kv_cache_dtype = "fp8_e4m3";
  cache.kv_cache_memory_bytes = 1 * kMiB;  // an explicit budget: the workspace still comes first
  SchedulerConfig sched;
  sched.max_model_len = 1024;
  sched.max_num_batched_tokens = 256;
  sched.max_num_seqs = 8;
  CHECK_THROWS_WITH(setup_kv_cache(cache, sched, *m, true),
                    Catch::Contains("rank 0 (fake-gpu:0): the workspace of 5.1 MiB (GEMM "
                                    "scratch 3.0 MiB, attention partials 2.0 MiB, attention "
                                    "plan 64.0 KiB) does not fit the 3.") &&
                        Catch::Contains(" free of 44.0 MiB after the weights"));
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
  CHECK_FALSE(with.memory.on_device);
  CHECK(with.memory.workspace.total() == 0);
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
