// Model-file readers on the fuzzers' inputs (tests/fuzz): every committed seed of the gguf and
// safetensors corpora opens as the file it was written to be (so the corpora stay valid
// starting points), and each input a fuzzer found crashing a reader is a regression case here.
// The crash cases fail under the sanitizer tree's UBSan/ASan (build-asan, scripts/test_sanitize.sh)
// on the unfixed code; in the Release tree they check the values.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "models/checkpoint.h"
#include "models/gguf.h"

using namespace octet;
namespace fs = std::filesystem;

namespace {

std::string corpus(const std::string& harness, const std::string& name) {
  return std::string(OCTET_SOURCE_DIR) + "/tests/fuzz/corpus/" + harness + "/" + name;
}

std::vector<std::string> seeds(const std::string& harness) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(corpus(harness, "")))
    if (e.path().filename().string().rfind("crash-", 0) != 0) out.push_back(e.path().string());
  return out;
}

}  // namespace

TEST_CASE("every gguf seed of the fuzz corpus is a valid GGUF file", "[gguf][fuzz]") {
  const std::vector<std::string> files = seeds("gguf");
  REQUIRE(files.size() >= 15);
  for (const std::string& path : files) {
    INFO(path);
    const GGUFFile f = GGUFFile::open(path);
    CHECK(f.find("general.architecture") != nullptr);
    for (const GGUFTensorInfo& t : f.tensors()) {
      const std::vector<float> v = f.dequantize(t);
      CHECK(int64_t(v.size()) == t.num_elements());
    }
  }
  const GGUFFile q8 = GGUFFile::open(corpus("gguf", "tensor_q8_0"));
  REQUIRE(q8.tensors().size() == 1);
  CHECK(q8.tensors()[0].dims == std::vector<int64_t>{32, 2});
  CHECK(q8.tensors()[0].type == GGMLType::Q8_0);
  const GGUFFile meta = GGUFFile::open(corpus("gguf", "metadata_only"));
  CHECK(meta.get_string_array("tokenizer.ggml.tokens") == std::vector<std::string>{"<s>", "a", "b"});
  CHECK(meta.get_int("llama.context_length") == 64);
}

TEST_CASE("every safetensors seed of the fuzz corpus is a valid safetensors file",
          "[safetensors][fuzz]") {
  const std::vector<std::string> files = seeds("safetensors");
  REQUIRE(files.size() >= 5);
  for (const std::string& path : files) {
    INFO(path);
    CHECK_NOTHROW(SafetensorsFile::open(path));
  }
  const SafetensorsFile all = SafetensorsFile::open(corpus("safetensors", "all_dtypes"));
  CHECK(all.tensors().size() == 12);
}

// Found by fuzz_safetensors (its seed empty_and_scalar): to_f32() of an F32 tensor with no
// elements passed the empty vector's data() (null) to memcpy, undefined behaviour that UBSan
// reports ("null pointer passed as argument 1").
TEST_CASE("safetensors: to_f32 of empty tensors and of a scalar", "[safetensors][fuzz]") {
  const SafetensorsFile f = SafetensorsFile::open(corpus("safetensors", "empty_and_scalar"));
  const TensorView* e = f.find("e");
  REQUIRE(e != nullptr);
  CHECK(e->shape == std::vector<int64_t>{0, 4});
  CHECK(e->num_elements() == 0);
  CHECK(e->to_f32().empty());
  const TensorView* s = f.find("s");  // shape [] = one element
  REQUIRE(s != nullptr);
  CHECK(s->num_elements() == 1);
  // The corpus writer's bytes are (i * 37 + 11) & 0x3F: 0x0B, 0x30 -> F16 0x300B = 2^-3 x (1 + 11/1024).
  const std::vector<float> v = s->to_f32();
  REQUIRE(v.size() == 1);
  CHECK(v[0] == 0.1263427734375f);
}
