// quantize_weight_e4m3 / quantize_weight_e4m3_as against codes and scales produced by
// compressed-tensors itself (scripts/make_w8a8_reference.py -> golden/w8a8_weight_quant.json):
// FP32, BF16 and FP16 weights, channel and tensor strategies, including ties, saturation,
// an all-zero row, a negative-only row and tiny rows. Expected: every code and scale identical.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/w8a8.h"

using namespace octet;

TEST_CASE("weight quantization reproduces compressed-tensors bit for bit", "[w8a8][golden]") {
  const std::string path =
      std::string(OCTET_SOURCE_DIR) + "/tests/kernels/golden/w8a8_weight_quant.json";
  std::ifstream in(path);
  REQUIRE(in.good());
  const auto doc = nlohmann::json::parse(in);
  REQUIRE(doc.at("cases").size() == 6);
  for (const auto& c : doc.at("cases")) {
    const std::string dtype = c.at("dtype"), strategy = c.at("strategy");
    INFO(dtype << " " << strategy << " (compressed-tensors "
               << doc.at("compressed_tensors_version").get<std::string>() << ")");
    const int64_t rows = c.at("rows"), cols = c.at("cols");
    const auto w = c.at("weight").get<std::vector<float>>();
    const auto scale = c.at("scale").get<std::vector<float>>();
    const auto codes = c.at("codes").get<std::vector<int>>();
    REQUIRE(static_cast<int64_t>(w.size()) == rows * cols);
    const auto g = strategy == "channel" ? ScaleGranularity::PerRow : ScaleGranularity::PerTensor;
    const auto a = dtype == "bfloat16"  ? DType::BF16
                   : dtype == "float16" ? DType::F16
                                        : DType::F32;
    std::vector<uint8_t> q(w.size());
    std::vector<float> s(scale.size());
    quantize_weight_e4m3_as(w.data(), rows, cols, g, a, q.data(), s.data());
    CHECK(s == scale);
    int64_t differing = 0;
    for (size_t i = 0; i < q.size(); ++i) differing += q[i] != codes[i];
    CHECK(differing == 0);
    if (a == DType::F32) {  // the plain entry point is the FP32 case
      quantize_weight_e4m3(w.data(), rows, cols, g, q.data(), s.data());
      CHECK(s == scale);
      differing = 0;
      for (size_t i = 0; i < q.size(); ++i) differing += q[i] != codes[i];
      CHECK(differing == 0);
    }
  }
}
