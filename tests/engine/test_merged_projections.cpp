// Merged projections (models/linear.h upload_linears_merged, Backend::merges_projections): on a
// backend that asks for them, each layer's q/k/v and gate/up FP8 weights sit side by side in
// one allocation (codes, scales), fp8_adjacent holds, the workspace shape lists the stacked
// GEMMs, and the model computes the same logits bit for bit as with separate allocations. Run
// on the CPU through a wrapper that asks for merging and row-major FP8 codes (the CUDA
// backend's layout); the CUDA backend's one-GEMM path over such weights is checked on a GPU by
// test_backend_fused ("linear_w8a8_multi over adjacent weights").
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/kv_budget.h"
#include "kernels/forwarding_backend.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "test_model_paths.h"

namespace octet {
namespace {

// The CPU with the CUDA backend's storage choices: row-major FP8 codes, merged or not.
struct RowMajorCpu final : ForwardingBackend {
  explicit RowMajorCpu(bool merge) : ForwardingBackend(make_backend("cpu")), merge_(merge) {}
  Fp8Layout fp8_weight_layout() const override { return Fp8Layout::RowMajor; }
  bool merges_projections() const override { return merge_; }
  bool merge_;
};

LlamaModel load_stories(bool merge) {
  GGUFFile file = GGUFFile::open(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf");
  LoadOptions o;
  o.quantization = "fp8";
  o.backend = std::make_shared<RowMajorCpu>(merge);
  return LlamaModel::load(file, o);
}

std::vector<WeightRef> refs(std::initializer_list<const LinearWeight*> ws) {
  std::vector<WeightRef> r;
  for (const LinearWeight* w : ws) r.push_back(w->ref());
  return r;
}

}  // namespace

TEST_CASE("merged projections: adjacent q/k/v and gate/up, stacked GEMMs in the workspace, "
          "the same logits",
          "[llama][merged]") {
  const LlamaModel merged = load_stories(true), separate = load_stories(false);
  for (const LlamaModel* m : {&merged, &separate}) {
    const bool want = m == &merged;
    CAPTURE(want);
    for (const LlamaLayerWeights& l : m->weights().layers) {
      const std::vector<WeightRef> qkv = refs({&l.q_proj, &l.k_proj, &l.v_proj});
      const std::vector<WeightRef> gate_up = refs({&l.gate_proj, &l.up_proj});
      CHECK(fp8_mergeable(qkv.data(), 3));
      CHECK(fp8_adjacent(qkv.data(), 3) == want);
      CHECK(fp8_adjacent(gate_up.data(), 2) == want);
      // Not adjacent in another order, nor with o_proj.
      const std::vector<WeightRef> kq = refs({&l.k_proj, &l.q_proj});
      CHECK_FALSE(fp8_adjacent(kq.data(), 2));
      CHECK_FALSE(fp8_adjacent(refs({&l.v_proj, &l.o_proj}).data(), 2));
      // Each weight keeps its own byte count (bandwidth figures sum them).
      CHECK(l.q_proj.weight.bytes() == 64 * 64);
      CHECK(l.k_proj.weight.bytes() == 32 * 64);
      CHECK(l.up_proj.scale.bytes() == 172 * 4);
    }
    const WorkspaceShape s = workspace_shape(*m, 64, 4, 256, 16, 0);
    int64_t stacked = 0;
    for (const WorkspaceShape::Linear& lin : s.fp8_linears) {
      if (!lin.merged) continue;
      ++stacked;
      CHECK(lin.k == 64);
      CHECK((lin.n == 64 + 32 + 32 || lin.n == 2 * 172));
    }
    CHECK(stacked == (want ? 2 * 5 : 0));  // q/k/v and gate/up of 5 layers
  }
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 285, 5, 67, 91};
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto c1 = merged.new_cache(n);
  auto c2 = separate.new_cache(n);
  const std::vector<float> a = merged.forward(prompt.data(), n, 0, c1, true);
  const std::vector<float> b = separate.forward(prompt.data(), n, 0, c2, true);
  REQUIRE(a.size() == static_cast<size_t>(n * 512));
  CHECK(a == b);
}

}  // namespace octet
