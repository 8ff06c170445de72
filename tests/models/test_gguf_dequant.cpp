// Dequantizers: hand-built blocks whose expected values were worked out by hand from ggml's block
// layouts (ggml-common.h), then random blocks checked against gguf-py's independent dequantizer
// (tests/models/golden/gguf_dequant.json, made by scripts/make_gguf_dequant_golden.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "gguf_writer.h"
#include "models/gguf.h"

using namespace octet;

namespace {

// fp16 bit patterns used below (sign | 5-bit exponent, bias 15 | 10-bit mantissa).
constexpr uint16_t kHalf = 0x3800;      // 0.5
constexpr uint16_t kQuarter = 0x3400;   // 0.25
constexpr uint16_t kMinusHalf = 0xB800; // -0.5
constexpr uint16_t kMinusOne = 0xBC00;  // -1.0

struct Block {
  std::vector<uint8_t> b;
  Block& f16(uint16_t bits) { b.push_back(uint8_t(bits)); b.push_back(uint8_t(bits >> 8)); return *this; }
  Block& u8(uint8_t v) { b.push_back(v); return *this; }
  Block& u32(uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i))); return *this; }
};

std::vector<float> run(GGMLType type, const std::vector<uint8_t>& bytes, int64_t n) {
  REQUIRE(int64_t(bytes.size()) == n / ggml_block_elems(type) * ggml_block_bytes(type));
  std::vector<float> out(size_t(n), -12345.f);
  dequantize_row(type, bytes.data(), out.data(), n);
  return out;
}

// qs[j]: element j in the low nibble, element j + 16 in the high nibble; here low = j, high = 15-j.
void add_ramp_nibbles(Block& blk) {
  for (int j = 0; j < 16; ++j) blk.u8(uint8_t(j | ((15 - j) << 4)));
}

}  // namespace

TEST_CASE("gguf dequant: block geometry and names of ggml types", "[gguf][dequant]") {
  CHECK(ggml_block_elems(GGMLType::F32) == 1);
  CHECK(ggml_block_bytes(GGMLType::F32) == 4);
  CHECK(ggml_block_bytes(GGMLType::BF16) == 2);
  CHECK(ggml_block_bytes(GGMLType::Q4_0) == 18);
  CHECK(ggml_block_bytes(GGMLType::Q4_1) == 20);
  CHECK(ggml_block_bytes(GGMLType::Q5_0) == 22);
  CHECK(ggml_block_bytes(GGMLType::Q5_1) == 24);
  CHECK(ggml_block_elems(GGMLType::Q8_0) == 32);
  CHECK(ggml_block_bytes(GGMLType::Q8_0) == 34);
  CHECK(ggml_block_bytes(GGMLType::Q8_1) == 36);  // 2 x f16 + 32 (gguf-py 0.19 says 40: stale)
  CHECK(ggml_block_elems(GGMLType::Q4_K) == 256);
  CHECK(ggml_block_bytes(GGMLType::Q2_K) == 84);
  CHECK(ggml_block_bytes(GGMLType::Q3_K) == 110);
  CHECK(ggml_block_bytes(GGMLType::Q4_K) == 144);
  CHECK(ggml_block_bytes(GGMLType::Q5_K) == 176);
  CHECK(ggml_block_bytes(GGMLType::Q6_K) == 210);
  CHECK(ggml_block_bytes(GGMLType::Q8_K) == 292);
  CHECK(ggml_block_bytes(GGMLType::IQ2_XXS) == 66);
  CHECK(ggml_block_bytes(GGMLType::IQ4_XS) == 136);
  CHECK(ggml_block_bytes(GGMLType::IQ1_M) == 56);
  CHECK(ggml_block_elems(static_cast<GGMLType>(4)) == 0);  // removed Q4_2
  CHECK(ggml_block_elems(static_cast<GGMLType>(99)) == 0);
  CHECK(ggml_type_name(GGMLType::Q4_K) == "Q4_K");
  CHECK(ggml_type_name(GGMLType::BF16) == "BF16");
  CHECK(ggml_type_name(static_cast<GGMLType>(99)) == "type99");
  CHECK(ggml_can_dequantize(GGMLType::Q6_K));
  CHECK_FALSE(ggml_can_dequantize(GGMLType::IQ2_XXS));
  CHECK_FALSE(ggml_can_dequantize(static_cast<GGMLType>(99)));
}

TEST_CASE("gguf dequant: dequantize_row rejects unsupported types and partial blocks", "[gguf][dequant]") {
  std::vector<uint8_t> src(66 * 2);
  std::vector<float> dst(512);
  CHECK_THROWS_AS(dequantize_row(GGMLType::IQ2_XXS, src.data(), dst.data(), 256), std::invalid_argument);
  CHECK_THROWS_WITH(dequantize_row(GGMLType::IQ2_XXS, src.data(), dst.data(), 256),
                    Catch::Contains("IQ2_XXS"));
  CHECK_THROWS_WITH(dequantize_row(GGMLType::Q8_0, src.data(), dst.data(), 33),
                    Catch::Contains("33") && Catch::Contains("32"));
  CHECK_THROWS_AS(dequantize_row(static_cast<GGMLType>(99), src.data(), dst.data(), 1),
                  std::invalid_argument);
}

TEST_CASE("gguf dequant: F32 F16 BF16 decode exactly including subnormals infinities and NaN", "[gguf][dequant]") {
  Block f32;
  f32.u32(0x3FC00000).u32(0xC0490FDB).u32(0x00000001);  // 1.5, -3.14159274, 2^-149
  CHECK(run(GGMLType::F32, f32.b, 3) == std::vector<float>{1.5f, -3.14159274f, 0x1p-149f});

  Block h;
  h.f16(0x3C00).f16(0xC500).f16(0x3555).f16(0x0001).f16(0x03FF).f16(0x8001).f16(0x0400)
      .f16(0x7BFF).f16(0x7C00).f16(0xFC00).f16(0x8000).f16(0x7E00);
  const auto x = run(GGMLType::F16, h.b, 12);
  CHECK(x[0] == 1.0f);
  CHECK(x[1] == -5.0f);
  CHECK(x[2] == 0.333251953125f);   // (1 + 341/1024) / 4
  CHECK(x[3] == 0x1p-24f);          // smallest subnormal
  CHECK(x[4] == 1023 * 0x1p-24f);   // largest subnormal
  CHECK(x[5] == -0x1p-24f);
  CHECK(x[6] == 0x1p-14f);          // smallest normal
  CHECK(x[7] == 65504.0f);          // largest finite
  CHECK(x[8] == INFINITY);
  CHECK(x[9] == -INFINITY);
  CHECK(x[10] == 0.0f);
  CHECK(std::signbit(x[10]));
  CHECK(std::isnan(x[11]));

  Block bf;
  bf.f16(0x3F80).f16(0xC040).f16(0x4049).f16(0x0001).f16(0x7F80).f16(0xFF80);
  const auto y = run(GGMLType::BF16, bf.b, 6);
  CHECK(y == std::vector<float>{1.0f, -3.0f, 3.140625f, 0x1p-133f, INFINITY, -INFINITY});
}

TEST_CASE("gguf dequant: Q8_0 and Q8_1: x = d * q with signed int8 q", "[gguf][dequant]") {
  Block q;
  q.f16(0xB400);  // d = -0.25
  for (int j = 0; j < 32; ++j) q.u8(uint8_t(int8_t(8 * j - 128)));  // -128, -120, ..., 120
  const std::vector<float> expected = {32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2,
                                       0, -2, -4, -6, -8, -10, -12, -14, -16, -18, -20, -22, -24,
                                       -26, -28, -30};
  CHECK(run(GGMLType::Q8_0, q.b, 32) == expected);

  Block q1;
  q1.f16(0x4000).f16(0x1234);  // d = 2, s (unused)
  for (int j = 0; j < 32; ++j) q1.u8(uint8_t(int8_t(j - 16)));
  const auto x = run(GGMLType::Q8_1, q1.b, 32);
  CHECK(x[0] == -32.f);
  CHECK(x[16] == 0.f);
  CHECK(x[31] == 30.f);
}

TEST_CASE("gguf dequant: Q4_0 x = d * (q - 8) with low nibbles first", "[gguf][dequant]") {
  Block q;
  q.f16(kHalf);
  add_ramp_nibbles(q);
  const std::vector<float> expected = {-4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2,
                                       2.5, 3, 3.5, 3.5, 3, 2.5, 2, 1.5, 1, 0.5, 0, -0.5, -1,
                                       -1.5, -2, -2.5, -3, -3.5, -4};
  CHECK(run(GGMLType::Q4_0, q.b, 32) == expected);
}

TEST_CASE("gguf dequant: Q4_1 x = d * q + m with d 0.5 m -1 nibbles 0..15", "[gguf][dequant]") {
  Block q;
  q.f16(kHalf).f16(kMinusOne);
  add_ramp_nibbles(q);
  const std::vector<float> expected = {-1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5,
                                       6, 6.5, 6.5, 6, 5.5, 5, 4.5, 4, 3.5, 3, 2.5, 2, 1.5, 1,
                                       0.5, 0, -0.5, -1};
  // Two blocks: the second with d = 0.25 (q * 0.25 - 1) shows the block stride of 20 bytes.
  Block two = q;
  two.f16(kQuarter).f16(kMinusOne);
  add_ramp_nibbles(two);
  const auto x = run(GGMLType::Q4_1, two.b, 64);
  CHECK(std::vector<float>(x.begin(), x.begin() + 32) == expected);
  CHECK(x[32] == -1.f);
  CHECK(x[47] == 2.75f);   // 15 * 0.25 - 1
  CHECK(x[48] == 2.75f);   // high nibble of qs[0] = 15
  CHECK(x[63] == -1.f);
}

TEST_CASE("gguf dequant: Q5_0: the fifth bit of element j is bit j of qh", "[gguf][dequant]") {
  Block q;
  q.f16(kMinusHalf).u32(0x80010003u);  // high bits for elements 0, 1, 16, 31
  add_ramp_nibbles(q);
  // q = [16, 17, 2..15, 31, 14..1, 16]; x = -0.5 * (q - 16)
  const std::vector<float> expected = {0, -0.5, 7, 6.5, 6, 5.5, 5, 4.5, 4, 3.5, 3, 2.5, 2, 1.5,
                                       1, 0.5, -7.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6,
                                       6.5, 7, 7.5, 0};
  CHECK(run(GGMLType::Q5_0, q.b, 32) == expected);
}

TEST_CASE("gguf dequant: Q5_1: x = d * q + m with the fifth bit from qh", "[gguf][dequant]") {
  Block q;
  q.f16(kQuarter).f16(0xC400).u32(0x80010003u);  // d = 0.25, m = -4
  add_ramp_nibbles(q);
  const std::vector<float> expected = {0, 0.25, -3.5, -3.25, -3, -2.75, -2.5, -2.25, -2, -1.75,
                                       -1.5, -1.25, -1, -0.75, -0.5, -0.25, 3.75, -0.5, -0.75,
                                       -1, -1.25, -1.5, -1.75, -2, -2.25, -2.5, -2.75, -3, -3.25,
                                       -3.5, -3.75, 0};
  CHECK(run(GGMLType::Q5_1, q.b, 32) == expected);
}

namespace {

// Q4_K/Q5_K header: d = 0.5, dmin = 0.25 and 12 bytes packing
// scales {1, 2, 3, 63, 17, 33, 48, 5} and mins {0, 4, 63, 8, 20, 40, 1, 62} (6 bits each).
Block k4_header() {
  Block b;
  b.f16(kHalf).f16(kQuarter);
  for (uint8_t v : {0x41, 0x82, 0xC3, 0x3F, 0x40, 0x84, 0x3F, 0xC8, 0x41, 0x81, 0x10, 0xE5}) b.u8(v);
  return b;
}

// 128 bytes: low nibble i % 16, high nibble 15 - i % 16.
void add_k4_qs(Block& b) {
  for (int i = 0; i < 128; ++i) b.u8(uint8_t((i & 0xF) | ((15 - (i & 0xF)) << 4)));
}

}  // namespace

TEST_CASE("gguf dequant: Q4_K: 6-bit scale/min packing and nibble order", "[gguf][dequant]") {
  Block q = k4_header();
  add_k4_qs(q);
  const auto x = run(GGMLType::Q4_K, q.b, 256);
  // x = 0.5 * scale[sb] * q - 0.25 * min[sb]; sb = sub-block of 32.
  CHECK(x[0] == 0.f);         // sb0: q 0
  CHECK(x[5] == 2.5f);        // sb0: 0.5 * 1 * 5
  CHECK(x[40] == 6.f);        // sb1: 0.5 * 2 * 7 - 0.25 * 4
  CHECK(x[81] == -14.25f);    // sb2: 0.5 * 3 * 1 - 0.25 * 63
  CHECK(x[112] == 470.5f);    // sb3: 0.5 * 63 * 15 - 0.25 * 8
  CHECK(x[127] == -2.f);      // sb3: q 0
  CHECK(x[131] == 20.5f);     // sb4 (scale 17, min 20: high bits from bytes 0 and 4)
  CHECK(x[160] == 237.5f);    // sb5 (33, 40): 0.5 * 33 * 15 - 10
  CHECK(x[202] == 239.75f);   // sb6 (48, 1): 0.5 * 48 * 10 - 0.25
  CHECK(x[225] == 19.5f);     // sb7 (5, 62): 0.5 * 5 * 14 - 15.5
  CHECK(x[239] == -15.5f);
  CHECK(x[255] == -15.5f);
}

TEST_CASE("gguf dequant: Q5_K: bit k of qh byte l is the fifth bit of element 32k + l", "[gguf][dequant]") {
  Block q = k4_header();
  for (int l = 0; l < 32; ++l) q.u8(uint8_t(1 << (l % 8)));  // qh: element 32k+l high iff k == l%8
  add_k4_qs(q);
  const auto x = run(GGMLType::Q5_K, q.b, 256);
  CHECK(x[0] == 8.f);         // q = 0 + 16
  CHECK(x[5] == 2.5f);
  CHECK(x[40] == 6.f);
  CHECK(x[41] == 21.f);       // q = 6 + 16: 0.5 * 2 * 22 - 1
  CHECK(x[81] == -14.25f);
  CHECK(x[82] == 11.25f);     // q = 2 + 16: 0.5 * 3 * 18 - 15.75
  CHECK(x[112] == 470.5f);
  CHECK(x[115] == 880.f);     // q = 12 + 16: 0.5 * 63 * 28 - 2
  CHECK(x[131] == 20.5f);
  CHECK(x[132] == 165.f);     // q = 4 + 16: 0.5 * 17 * 20 - 5
  CHECK(x[160] == 237.5f);
  CHECK(x[165] == 419.f);     // q = 10 + 16: 0.5 * 33 * 26 - 10
  CHECK(x[198] == 527.75f);   // q = 6 + 16: 0.5 * 48 * 22 - 0.25
  CHECK(x[202] == 239.75f);
  CHECK(x[225] == 19.5f);
  CHECK(x[239] == 24.5f);     // q = 0 + 16: 0.5 * 5 * 16 - 15.5
  CHECK(x[255] == 24.5f);
}

TEST_CASE("gguf dequant: Q6_K low bits from ql high bits from qh signed scales q - 32", "[gguf][dequant]") {
  Block q;
  for (int i = 0; i < 128; ++i) q.u8(uint8_t(i));  // ql
  for (int i = 0; i < 64; ++i) q.u8(i < 32 ? 0xE4 : 0x1B);  // qh: high bits k (first half), 3-k
  for (int s : {1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 10, -10, 2, -3, 4, -1}) q.u8(uint8_t(int8_t(s)));
  q.f16(kHalf);
  const auto x = run(GGMLType::Q6_K, q.b, 256);
  // x = 0.5 * scale[e / 16] * (q - 32)
  CHECK(x[0] == -16.f);     // q 0, scale 1
  CHECK(x[17] == 31.f);     // q 1, scale -2
  CHECK(x[37] == -16.5f);   // low 5 (ql[37]), high 1: q 21, scale 3
  CHECK(x[84] == -3.f);     // low 1 (ql[20] >> 4), high 2: q 33, scale -6
  CHECK(x[127] == -76.f);   // low 3 (ql[63] >> 4), high 3: q 51, scale -8
  CHECK(x[128] == 1016.f);  // second half: low 0, high 3: q 48, scale 127
  CHECK(x[144] == -1024.f); // q 48, scale -128
  CHECK(x[163] == 15.f);    // low 3 (ql[99]), high 2: q 35, scale 10
  CHECK(x[223] == 16.5f);   // low 5 (ql[95] >> 4), high 1: q 21, scale -3
  CHECK(x[224] == -52.f);   // low 6 (ql[96] >> 4), high 0: q 6, scale 4
  CHECK(x[255] == 12.5f);   // low 7 (ql[127] >> 4), high 0: q 7, scale -1
}

TEST_CASE("gguf dequant: Q2_K 2-bit q with 4-bit scale and min per 16 elements", "[gguf][dequant]") {
  Block q;
  for (int i = 0; i < 16; ++i) q.u8(uint8_t(i | ((15 - i) << 4)));  // scale i, min 15 - i
  for (int j = 0; j < 64; ++j) q.u8(j % 2 == 0 ? 0xE4 : 0x1B);       // q = k (even l), 3 - k (odd)
  q.f16(kHalf).f16(kQuarter);
  const auto x = run(GGMLType::Q2_K, q.b, 256);
  // x = 0.5 * scale * q - 0.25 * min; element 128h + 32k + l uses bits 2k of qs[32h + l].
  CHECK(x[0] == -3.75f);
  CHECK(x[17] == -2.f);     // sub-block 1, q 3: 1.5 - 3.5
  CHECK(x[34] == -2.25f);   // sub-block 2, q 1: 1 - 3.25
  CHECK(x[85] == 0.f);      // sub-block 5, q 1: 2.5 - 2.5
  CHECK(x[126] == 8.5f);    // sub-block 7, q 3: 10.5 - 2
  CHECK(x[127] == -2.f);    // q 0
  CHECK(x[128] == -1.75f);  // sub-block 8, q 0
  CHECK(x[212] == 12.5f);   // sub-block 13, q 2: 13 - 0.5
  CHECK(x[254] == 22.5f);   // sub-block 15, q 3
}

TEST_CASE("gguf dequant: Q3_K: 6-bit scales (offset 32) and the hmask bit that cancels -4", "[gguf][dequant]") {
  Block q;
  for (int l = 0; l < 32; ++l) q.u8(uint8_t(1 << (l % 8)));  // hmask: element 128h+32k+l keeps
                                                             // q iff 4h + k == l % 8
  for (int j = 0; j < 64; ++j) q.u8(0xE4);                   // low bits of element 32k+l: k
  // Scales S = {0,1,31,32,33,63,40,20,48,16,5,60,34,30,47,17} (used as S - 32).
  for (uint8_t v : {0x00, 0x01, 0x5F, 0xC0, 0x21, 0xEF, 0xF8, 0x14, 0xB8, 0x5C, 0x89, 0x76}) q.u8(v);
  q.f16(kHalf);
  const auto x = run(GGMLType::Q3_K, q.b, 256);
  CHECK(x[1] == 64.f);      // scale -32, q 0 - 4
  CHECK(x[16] == 0.f);      // scale -31, hbit: q 0
  CHECK(x[17] == 62.f);     // scale -31, q -4
  CHECK(x[33] == -0.5f);    // scale -1, hbit: q 1
  CHECK(x[66] == 1.f);      // scale 1, hbit: q 2
  CHECK(x[67] == -1.f);     // scale 1, q 2 - 4
  CHECK(x[85] == -31.f);    // scale 31, q -2
  CHECK(x[99] == 12.f);     // scale 8, hbit: q 3
  CHECK(x[112] == 6.f);     // scale -12, q -1
  CHECK(x[133] == -32.f);   // scale 16, q -4
  CHECK(x[157] == 32.f);    // scale -16, q -4
  CHECK(x[165] == -13.5f);  // scale -27, hbit: q 1
  CHECK(x[176] == -42.f);   // scale 28, q -3
  CHECK(x[198] == 2.f);     // scale 2, hbit: q 2
  CHECK(x[222] == -2.f);    // scale -2, hbit: q 2
  CHECK(x[231] == 22.5f);   // scale 15, hbit: q 3
  CHECK(x[254] == 7.5f);    // scale -15, q -1
  CHECK(x[255] == -22.5f);  // scale -15, hbit: q 3
}

TEST_CASE("gguf dequant: random blocks of every supported type match gguf-py's dequantizer", "[gguf][dequant]") {
  std::ifstream in(std::string(OCTET_SOURCE_DIR) + "/tests/models/golden/gguf_dequant.json");
  REQUIRE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  std::map<std::string, GGMLType> by_name;
  for (uint32_t id = 0; id < 40; ++id) {
    const auto t = static_cast<GGMLType>(id);
    if (ggml_block_elems(t) != 0) by_name[ggml_type_name(t)] = t;
  }
  int n_types = 0;
  for (const auto& g : golden["random_blocks"]) {
    const std::string name = g["type"].get<std::string>();
    INFO("type " << name);
    REQUIRE(by_name.count(name) == 1);
    const std::string hex = g["bytes"].get<std::string>();
    std::vector<uint8_t> bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(uint8_t(std::stoi(hex.substr(i, 2), nullptr, 16)));
    const auto expected = g["values"].get<std::vector<double>>();
    const auto x = run(by_name[name], bytes, int64_t(expected.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("element " << i);
      REQUIRE(x[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-30));
    }
    ++n_types;
  }
  CHECK(n_types == 11);  // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K BF16
}

TEST_CASE("gguf dequant: GGUFFile::dequantize returns a multi-row Q4_1 tensor row after row", "[gguf][dequant]") {
  using namespace octet::testing;
  TempDir dir;
  const std::string path = dir.file("q41.gguf");
  // dims [64, 2]: two rows of two blocks; block b has d = 0.5, m = b (fp16 0, 1, 2, 3).
  std::vector<uint8_t> data;
  const uint16_t ms[] = {0x0000, 0x3C00, 0x4000, 0x4200};
  for (uint16_t m : ms) {
    Block blk;
    blk.f16(kHalf).f16(m);
    add_ramp_nibbles(blk);
    data.insert(data.end(), blk.b.begin(), blk.b.end());
  }
  GGUFWriter w;
  w.tensor({"t", {64, 2}, 3, data, {}});
  w.write(path);
  const GGUFFile f = GGUFFile::open(path);
  const auto x = f.dequantize(f.tensor("t"));
  REQUIRE(x.size() == 128);
  for (int b = 0; b < 4; ++b) {
    CHECK(x[size_t(32 * b)] == float(b));           // q 0
    CHECK(x[size_t(32 * b + 15)] == 7.5f + b);      // q 15
    CHECK(x[size_t(32 * b + 16)] == 7.5f + b);
    CHECK(x[size_t(32 * b + 31)] == float(b));
  }
}
