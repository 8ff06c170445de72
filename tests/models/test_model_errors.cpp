// Bad model files give a ModelFileError naming the file and the problem (never a crash):
// unsupported architecture, missing tensor, mismatched shape, unsupported tensor type,
// inconsistent head counts. Files are built with tests/gguf_writer.h.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "gguf_writer.h"
#include "models/gguf.h"
#include "models/llama.h"

using namespace octet;
using namespace octet::testing;

namespace {

// A tiny llama: hidden 8, 2 heads (head_dim 4), 1 KV head, 1 layer, ffn 16, vocab 4, all F32.
struct TinyLlama {
  std::string arch = "llama";
  uint32_t heads = 2, kv_heads = 1;
  uint32_t blocks = 1;
  float rms_eps = 1e-5f;
  std::string skip_tensor;                       // omit this tensor
  std::string reshape_tensor;                    // give this tensor a wrong shape
  std::string retype_tensor;                     // store this tensor as IQ2_XXS (type 16)

  void write(const std::string& path) const {
    GGUFWriter w;
    w.kv_str("general.architecture", arch);
    const std::string a = arch + ".";
    w.kv_u32(a + "embedding_length", 8).kv_u32(a + "block_count", blocks);
    w.kv(a + "attention.layer_norm_rms_epsilon", kF32, Bytes().f32(rms_eps));
    w.kv_u32(a + "attention.head_count", heads).kv_u32(a + "attention.head_count_kv", kv_heads);
    w.kv_u32(a + "feed_forward_length", 16).kv_u32(a + "context_length", 32);
    auto add = [&](const std::string& name, std::vector<uint64_t> dims) {
      if (name == skip_tensor) return;
      if (name == reshape_tensor) dims[0] += 1;
      uint64_t n = 1;
      for (uint64_t d : dims) n *= d;
      TensorSpec t{name, dims, 0, std::vector<uint8_t>(n * 4, 0), std::nullopt};
      for (uint64_t i = 0; i < n; ++i) {
        const float v = 0.01f * static_cast<float>(i % 17);
        std::memcpy(t.data.data() + 4 * i, &v, 4);
      }
      if (name == retype_tensor) {
        t.type = 16;  // IQ2_XXS: 256-element blocks of 66 bytes
        t.dims = {256};
        t.data.assign(66, 0);
      }
      w.tensor(t);
    };
    add("token_embd.weight", {8, 4});
    add("output_norm.weight", {8});
    add("blk.0.attn_norm.weight", {8});
    add("blk.0.attn_q.weight", {8, 8});
    add("blk.0.attn_k.weight", {8, 4});
    add("blk.0.attn_v.weight", {8, 4});
    add("blk.0.attn_output.weight", {8, 8});
    add("blk.0.ffn_norm.weight", {8});
    add("blk.0.ffn_gate.weight", {8, 16});
    add("blk.0.ffn_up.weight", {8, 16});
    add("blk.0.ffn_down.weight", {16, 8});
    w.write(path);
  }
};

// Loads `path` and returns the ModelFileError message ("" when it loaded).
std::string load_error(const std::string& path) {
  try {
    GGUFFile f = GGUFFile::open(path);
    LlamaModel::load(f);
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a well-formed tiny llama loads and runs", "[model][errors]") {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  TinyLlama{}.write(path);
  GGUFFile f = GGUFFile::open(path);
  LlamaModel m = LlamaModel::load(f);
  CHECK(m.config().head_dim == 4);
  CHECK(m.config().tie_word_embeddings);
  CHECK(m.config().rope_theta == 10000.0f);  // not stored: llama.cpp's default
  auto cache = m.new_cache(4);
  const int32_t ids[] = {0, 3, 1};
  const auto logits = m.forward(ids, 3, 0, cache, true);
  CHECK(logits.size() == 3 * 4);
  const int32_t bad[] = {4};
  CHECK_THROWS_WITH(m.forward(bad, 1, 3, cache, false), Catch::Contains("outside the vocabulary"));
  const int32_t ok[] = {1};
  CHECK_THROWS_WITH(m.forward(ok, 1, 4, cache, false), Catch::Contains("exceed the cache"));
}

TEST_CASE("unsupported architecture is named", "[model][errors]") {
  TempDir dir;
  const std::string path = dir.file("arch.gguf");
  TinyLlama t;
  t.arch = "mamba";
  t.write(path);
  const std::string msg = load_error(path);
  CHECK_THAT(msg, Catch::StartsWith(path + ": "));
  CHECK_THAT(msg, Catch::Contains("unsupported architecture 'mamba'"));
}

TEST_CASE("a missing tensor is named", "[model][errors]") {
  TempDir dir;
  const std::string path = dir.file("missing.gguf");
  TinyLlama t;
  t.skip_tensor = "blk.0.ffn_up.weight";
  t.write(path);
  const std::string msg = load_error(path);
  CHECK_THAT(msg, Catch::StartsWith(path + ": "));
  CHECK_THAT(msg, Catch::Contains("blk.0.ffn_up.weight"));
  CHECK_THAT(msg, Catch::Contains("missing"));
}

TEST_CASE("a tensor with the wrong shape is named with both shapes", "[model][errors]") {
  TempDir dir;
  const std::string path = dir.file("shape.gguf");
  TinyLlama t;
  t.reshape_tensor = "blk.0.attn_k.weight";
  t.write(path);
  const std::string msg = load_error(path);
  CHECK_THAT(msg, Catch::StartsWith(path + ": "));
  CHECK_THAT(msg, Catch::Contains("blk.0.attn_k.weight has shape [9, 4], expected [8, 4]"));
}

TEST_CASE("a weight of an unsupported tensor type is named", "[model][errors]") {
  TempDir dir;
  const std::string path = dir.file("type.gguf");
  TinyLlama t;
  t.retype_tensor = "blk.0.ffn_norm.weight";
  t.write(path);
  const std::string msg = load_error(path);
  CHECK_THAT(msg, Catch::StartsWith(path + ": "));
  CHECK_THAT(msg, Catch::Contains("blk.0.ffn_norm.weight"));
}

TEST_CASE("inconsistent head counts are rejected", "[model][errors]") {
  TempDir dir;
  const std::string path = dir.file("heads.gguf");
  TinyLlama t;
  t.kv_heads = 3;  // 2 heads are not a multiple of 3
  t.write(path);
  const std::string msg = load_error(path);
  CHECK_THAT(msg, Catch::StartsWith(path + ": "));
  CHECK_THAT(msg, Catch::Contains("head_count_kv"));
}

TEST_CASE("a block_count beyond the file's tensors fails before allocating", "[model][errors]") {
  TempDir dir;
  const std::string path = dir.file("blocks.gguf");
  TinyLlama t;
  t.blocks = 2147483647u;
  t.write(path);
  const std::string msg = load_error(path);
  CHECK_THAT(msg, Catch::StartsWith(path + ": "));
  CHECK_THAT(msg, Catch::Contains("block_count is 2147483647"));
}

TEST_CASE("a non-finite or negative rms epsilon is rejected", "[model][errors]") {
  TempDir dir;
  for (float eps : {std::nanf(""), -1.0f}) {
    const std::string path = dir.file("eps.gguf");
    TinyLlama t;
    t.rms_eps = eps;
    t.write(path);
    CHECK_THAT(load_error(path), Catch::Contains("layer_norm_rms_epsilon"));
  }
}
