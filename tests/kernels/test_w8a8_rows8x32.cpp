// The Rows8x32 weight layout of the AVX2 W8A8 path (w8a8.h pack_fp8_rows8x32, issue 28):
//  - the packed bytes sit where the layout's documented formula puts them (two by hand);
//  - the AVX2 path on packed weights gives the row-major AVX2 path's bits, fused and as part
//    sums, for GEMV and GEMM, k tails, padding rows, k parts, subnormal codes and under DAZ/FTZ;
//  - the CPU backend packs what it uploads when the AVX2 path runs;
//  - linear_w8a8_multi (several weights of one input in one parallel loop) gives each weight's
//    own bits.
// The layout tests run everywhere; the kernel tests exit 77 (skipped) without AVX2.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "fp8_test_support.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"

using namespace octet;

namespace {

void require_avx2() {
  if (!fp8_avx2_available()) {
    std::cout << "SKIPPED: this CPU lacks AVX2+FMA+F16C\n";
    std::exit(77);
  }
}

// y of the AVX2 path for w in `layout` (packed from row-major codes when Rows8x32).
std::vector<float> avx2_linear(const std::vector<uint8_t>& qa, const std::vector<float>& sa,
                               const std::vector<uint8_t>& qw, const std::vector<float>& sw,
                               int64_t m, int64_t n, int64_t k, int64_t groups, Fp8Layout layout) {
  std::vector<uint8_t> data = qw;
  if (layout == Fp8Layout::Rows8x32) {
    data.assign(static_cast<size_t>(fp8_rows8x32_bytes(n, k, groups)), 0xFF);
    pack_fp8_rows8x32(qw.data(), n, k, groups, data.data());
  }
  const Fp8WeightView w{data.data(), sw.data(), ScaleGranularity::PerRow, n, k, groups, layout};
  std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
  linear_w8a8_avx2(qa.data(), sa.data(), ScaleGranularity::PerRow, w, nullptr, y.data(), m);
  return y;
}

std::vector<float> avx2_partials(const std::vector<uint8_t>& qa, const std::vector<uint8_t>& qw,
                                 int64_t m, int64_t n, int64_t k, int64_t groups,
                                 Fp8Layout layout) {
  std::vector<uint8_t> data = qw;
  if (layout == Fp8Layout::Rows8x32) {
    data.assign(static_cast<size_t>(fp8_rows8x32_bytes(n, k, groups)), 0);
    pack_fp8_rows8x32(qw.data(), n, k, groups, data.data());
  }
  const std::vector<float> sw(static_cast<size_t>(n), 1.0f);
  const Fp8WeightView w{data.data(), sw.data(), ScaleGranularity::PerRow, n, k, groups, layout};
  std::vector<float> acc(static_cast<size_t>(groups * m * n), -1.0f);
  linear_w8a8_partials(qa.data(), w, acc.data(), m, W8A8Path::Avx2);
  return acc;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("rows8x32: bytes where the layout puts them", "[w8a8][rows8x32]") {
  // n = 9 (two blocks, the second padded with 7 zero rows), k = 40 (two chunks, the second
  // with 24 padding codes), one part: 2 x 2 x 256 bytes.
  const int64_t n = 9, k = 40;
  REQUIRE(fp8_rows8x32_bytes(n, k, 1) == 1024);
  std::vector<uint8_t> w(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) w[i] = static_cast<uint8_t>(1 + i % 120);  // no zero code
  std::vector<uint8_t> p(1024, 0xEE);
  pack_fp8_rows8x32(w.data(), n, k, 1, p.data());
  // By hand: row 3, element 17 (chunk 0, quarter 2, lane 1): 3 * 32 + 4 * 1 + 1 = 101.
  CHECK(p[101] == w[3 * k + 17]);
  // Row 8 (block 1, row 0), element 33 (chunk 1, quarter 0, lane 1): (1 * 2 + 1) * 256 + 4.
  CHECK(p[772] == w[8 * k + 33]);
  // Every code by the formula; everything else is padding (zero).
  std::vector<bool> used(1024, false);
  static const int quarter_byte[4] = {0, 2, 1, 3};
  for (int64_t j = 0; j < n; ++j)
    for (int64_t t = 0; t < k; ++t) {
      const int64_t c = t / 32, l = t % 32;
      const int64_t at = ((j / 8) * 2 + c) * 256 + (j % 8) * 32 + 4 * (l % 8) + quarter_byte[l / 8];
      INFO("row " << j << " element " << t);
      CHECK(p[at] == w[j * k + t]);
      used[at] = true;
    }
  for (int64_t i = 0; i < 1024; ++i)
    if (!used[i]) CHECK(p[i] == 0);
  // k parts: each part chunked on its own (k 64 in 4 parts of 16: one padded chunk each).
  REQUIRE(fp8_rows8x32_bytes(8, 64, 4) == 4 * 256);
  std::vector<uint8_t> w2(8 * 64);
  for (int64_t i = 0; i < 8 * 64; ++i) w2[i] = static_cast<uint8_t>(1 + i % 120);
  std::vector<uint8_t> p2(1024, 0xEE);
  pack_fp8_rows8x32(w2.data(), 8, 64, 4, p2.data());
  // Row 5, element 50 = part 3, its element 2 (quarter 0, lane 2): 3 * 256 + 5 * 32 + 8.
  CHECK(p2[3 * 256 + 5 * 32 + 8] == w2[5 * 64 + 50]);
  // Element 16 of a part is padding: part 0's chunk has elements 0..15 only.
  CHECK(p2[5 * 32 + 4 * 0 + 1] == 0);
  CHECK(fp8_rows8x32_bytes(0, 64, 1) == 0);
  CHECK(fp8_rows8x32_bytes(1, 1, 1) == 256);
}

TEST_CASE("rows8x32: the avx2 path gives the row-major bits", "[w8a8][rows8x32][avx2]") {
  require_avx2();
  struct Case {
    int64_t m, n, k, groups;
  };
  // GEMV and GEMM; n with padding rows; k with 32-code tails (40, 43 per part, 16 per part).
  const Case cases[] = {{1, 8, 32, 1},   {1, 9, 40, 1},   {3, 9, 40, 1},     {1, 33, 168, 3},
                        {5, 33, 168, 3}, {1, 7, 64, 4},   {2, 7, 64, 4},     {1, 40, 172, 4},
                        {7, 40, 172, 4}, {17, 20, 576, 3}, {1, 1, 1, 1},     {4, 3, 5, 1},
                        {1, 256, 1024, 1}, {6, 256, 1024, 2}, {1, 1536, 576, 1}};
  std::mt19937 rng(2828);
  for (const auto& c : cases) {
    INFO("m " << c.m << " n " << c.n << " k " << c.k << " parts " << c.groups);
    const auto qa = octet_test::random_finite_e4m3(rng, c.m * c.k);
    const auto qw = octet_test::random_finite_e4m3(rng, c.n * c.k);
    std::vector<float> sa(static_cast<size_t>(c.m)), sw(static_cast<size_t>(c.n));
    for (auto& s : sa) s = 0.001f * static_cast<float>(1 + rng() % 1000);
    for (auto& s : sw) s = 0.0001f * static_cast<float>(1 + rng() % 1000);
    const auto rm = avx2_linear(qa, sa, qw, sw, c.m, c.n, c.k, c.groups, Fp8Layout::RowMajor);
    const auto pk = avx2_linear(qa, sa, qw, sw, c.m, c.n, c.k, c.groups, Fp8Layout::Rows8x32);
    CHECK(same_bits(rm, pk));
    // Not a vacuous match: the outputs are real sums.
    bool any_nonzero = false;
    for (float v : pk) any_nonzero = any_nonzero || v != 0.0f;
    CHECK(any_nonzero);
    CHECK(same_bits(avx2_partials(qa, qw, c.m, c.n, c.k, c.groups, Fp8Layout::RowMajor),
                    avx2_partials(qa, qw, c.m, c.n, c.k, c.groups, Fp8Layout::Rows8x32)));
    // Batch invariance on the packed layout: row 0 alone equals row 0 of the batch.
    if (c.m > 1) {
      const std::vector<uint8_t> qa0(qa.begin(), qa.begin() + c.k);
      const auto one = avx2_linear(qa0, sa, qw, sw, 1, c.n, c.k, c.groups, Fp8Layout::Rows8x32);
      CHECK(same_bits(one, std::vector<float>(pk.begin(), pk.begin() + c.n)));
    }
  }
}

// linear_w8a8_multi (q/k/v, gate/up of one input): on the AVX2 path at m == 1 all weights' rows
// run in one parallel loop; each output must be the weight's own linear_w8a8 bits (and near
// the reference), with biases, per-tensor scales, padding rows and k parts; a weight of another
// k, and m > 1, take one call each.
TEST_CASE("linear_w8a8_multi: each weight's own bits in one call", "[w8a8][rows8x32][avx2]") {
  require_avx2();
  std::mt19937 rng(2929);
  const Fp8Layout layout = w8a8_preferred_layout();
  for (int64_t groups : {1, 3}) {
    for (int64_t m : {1, 2, 3, 4, 5}) {  // GEMV blocks of 1-4 rows, then the GEMM
      const int64_t k = 96;
      const int64_t ns[] = {40, 13, 8, 1};
      struct Owned {
        std::vector<uint8_t> codes, data;
        std::vector<float> scale, bias;
      };
      std::vector<Owned> own(4);
      std::vector<Fp8WeightView> views;
      std::vector<const float*> biases;
      for (int i = 0; i < 4; ++i) {
        const int64_t n = ns[i];
        Owned& o = own[i];
        o.codes = octet_test::random_finite_e4m3(rng, n * k);
        o.data.assign(static_cast<size_t>(fp8_weight_bytes(layout, n, k, groups)), 0);
        pack_fp8_weight(layout, o.codes.data(), n, k, groups, o.data.data());
        o.scale.resize(i == 1 ? 1 : static_cast<size_t>(n));  // weight 1: per-tensor
        for (auto& s : o.scale) s = 0.0001f * static_cast<float>(1 + rng() % 1000);
        if (i != 2) {  // weight 2: no bias
          o.bias.resize(static_cast<size_t>(n));
          for (auto& b : o.bias)
            b = 0.01f * static_cast<float>(static_cast<int>(rng() % 200) - 100);
        }
        views.push_back({o.data.data(), o.scale.data(),
                         i == 1 ? ScaleGranularity::PerTensor : ScaleGranularity::PerRow, n, k,
                         groups, layout});
        biases.push_back(o.bias.empty() ? nullptr : o.bias.data());
      }
      const auto qa = octet_test::random_finite_e4m3(rng, m * k);
      std::vector<float> sa(static_cast<size_t>(m));
      for (auto& s : sa) s = 0.001f * static_cast<float>(1 + rng() % 1000);
      std::vector<std::vector<float>> got(4), want(4), ref(4);
      std::vector<float*> ys;
      for (int i = 0; i < 4; ++i) {
        got[i].assign(static_cast<size_t>(m * ns[i]), -7.0f);
        ys.push_back(got[i].data());
      }
      linear_w8a8_multi(qa.data(), sa.data(), ScaleGranularity::PerRow, views.data(),
                        biases.data(), ys.data(), 4, m);
      for (int i = 0; i < 4; ++i) {
        INFO("parts " << groups << " m " << m << " weight " << i);
        want[i].assign(static_cast<size_t>(m * ns[i]), -9.0f);
        linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, views[i], biases[i],
                    want[i].data(), m);
        CHECK(same_bits(got[i], want[i]));
        // And the reference's value (row-major codes), within FP32 summation-order error.
        Fp8WeightView rm = views[i];
        rm.data = own[i].codes.data();
        rm.layout = Fp8Layout::RowMajor;
        ref[i].assign(static_cast<size_t>(m * ns[i]), 0.0f);
        ref::linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, rm, biases[i],
                         ref[i].data(), m);
        for (size_t j = 0; j < ref[i].size(); ++j)
          CHECK(got[i][j] == Approx(ref[i][j]).epsilon(1e-4).margin(1e-4));
      }
    }
  }
}

// Weights big enough for the parallel loop (its chunks start inside a weight), and weights
// whose k parts differ (one call each): every output is the weight's own linear_w8a8 bits.
TEST_CASE("linear_w8a8_multi: parallel chunks and mixed k parts", "[w8a8][rows8x32][avx2]") {
  require_avx2();
  std::mt19937 rng(3131);
  const Fp8Layout layout = w8a8_preferred_layout();
  struct Shape {
    int64_t k;
    std::vector<int64_t> ns, groups;
  };
  const Shape shapes[] = {{576, {1024, 256, 256}, {1, 1, 1}}, {576, {1536, 1536}, {3, 3}},
                          {96, {40, 24}, {1, 3}}};
  for (const Shape& sh : shapes) {
    for (int64_t m : {1, 4}) {
      const int count = static_cast<int>(sh.ns.size());
      std::vector<std::vector<uint8_t>> data(count);
      std::vector<std::vector<float>> scale(count), got(count);
      std::vector<Fp8WeightView> views;
      std::vector<float*> ys;
      for (int i = 0; i < count; ++i) {
        const int64_t n = sh.ns[i];
        const auto codes = octet_test::random_finite_e4m3(rng, n * sh.k);
        data[i].assign(static_cast<size_t>(fp8_weight_bytes(layout, n, sh.k, sh.groups[i])), 0);
        pack_fp8_weight(layout, codes.data(), n, sh.k, sh.groups[i], data[i].data());
        scale[i].assign(static_cast<size_t>(n), 0.003f);
        views.push_back({data[i].data(), scale[i].data(), ScaleGranularity::PerRow, n, sh.k,
                         sh.groups[i], layout});
        got[i].assign(static_cast<size_t>(m * n), -7.0f);
        ys.push_back(got[i].data());
      }
      const auto qa = octet_test::random_finite_e4m3(rng, m * sh.k);
      const std::vector<float> sa(static_cast<size_t>(m), 0.05f);
      const std::vector<const float*> biases(static_cast<size_t>(count), nullptr);
      linear_w8a8_multi(qa.data(), sa.data(), ScaleGranularity::PerRow, views.data(),
                        biases.data(), ys.data(), count, m);
      for (int i = 0; i < count; ++i) {
        INFO("k " << sh.k << " m " << m << " weight " << i);
        std::vector<float> want(static_cast<size_t>(m * sh.ns[i]), -9.0f);
        linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, views[i], nullptr,
                    want.data(), m);
        CHECK(same_bits(got[i], want));
      }
    }
  }
}

TEST_CASE("linear_w8a8_multi: a row-major weight among packed ones takes its own call",
          "[w8a8][rows8x32][avx2]") {
  require_avx2();
  if (w8a8_preferred_layout() != Fp8Layout::Rows8x32) return;  // AVX-512: every call is its own
  std::mt19937 rng(3030);
  const int64_t n = 24, k = 64;
  const auto qa = octet_test::random_finite_e4m3(rng, k);
  const auto c0 = octet_test::random_finite_e4m3(rng, n * k);
  const auto c1 = octet_test::random_finite_e4m3(rng, n * k);
  std::vector<uint8_t> p0(static_cast<size_t>(fp8_rows8x32_bytes(n, k, 1)));
  pack_fp8_rows8x32(c0.data(), n, k, 1, p0.data());
  const std::vector<float> sw(static_cast<size_t>(n), 0.01f), sa(1, 0.02f);
  const Fp8WeightView ws[] = {
      {p0.data(), sw.data(), ScaleGranularity::PerRow, n, k, 1, Fp8Layout::Rows8x32},
      {c1.data(), sw.data(), ScaleGranularity::PerRow, n, k, 1, Fp8Layout::RowMajor}};
  const float* biases[] = {nullptr, nullptr};
  std::vector<float> g0(n), g1(n), w0(n), w1(n);
  float* ys[] = {g0.data(), g1.data()};
  linear_w8a8_multi(qa.data(), sa.data(), ScaleGranularity::PerRow, ws, biases, ys, 2, 1);
  linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, ws[0], nullptr, w0.data(), 1);
  linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, ws[1], nullptr, w1.data(), 1);
  CHECK(same_bits(g0, w0));
  CHECK(same_bits(g1, w1));
  bool any_nonzero = false;
  for (float v : g1) any_nonzero = any_nonzero || v != 0.0f;
  CHECK(any_nonzero);
}

TEST_CASE("rows8x32: subnormal weight codes exact under DAZ and FTZ", "[w8a8][rows8x32][avx2]") {
  require_avx2();
  // Only subnormal weight codes (the packed path widens them to FP32 subnormals) and zeros.
  std::mt19937 rng(7);
  const int64_t n = 16, k = 96;
  std::vector<uint8_t> qw(n * k);
  for (auto& c : qw) c = static_cast<uint8_t>((rng() % 8) | (rng() % 2 ? 0x80 : 0));
  for (int64_t m : {1, 3, 7}) {  // GEMV, batched GEMV, GEMM (its FP16 tile)
    const auto qa = octet_test::random_finite_e4m3(rng, m * k);
    const std::vector<float> sa(static_cast<size_t>(m), 1.0f), sw(n, 1.0f);
    const auto plain = avx2_linear(qa, sa, qw, sw, m, n, k, 1, Fp8Layout::RowMajor);
    std::vector<float> packed;
    {
      octet_test::FlushDenormalsScope daz;  // small enough to run on this thread
      packed = avx2_linear(qa, sa, qw, sw, m, n, k, 1, Fp8Layout::Rows8x32);
    }
    INFO("m " << m);
    CHECK(same_bits(plain, packed));
    // The exact sums, in float64 (products of two E4M3 values are exact; k = 96 terms).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t)
          s += static_cast<double>(fp8_e4m3_to_float(qa[i * k + t])) *
               fp8_e4m3_to_float(qw[j * k + t]);
        CHECK(packed[i * n + j] == Approx(s).margin(1e-9).epsilon(1e-5));
      }
  }
}

TEST_CASE("avx2 w8a8: a NaN activation code makes its row NaN, the other rows keep their bits",
          "[w8a8][rows8x32][avx2]") {
  require_avx2();
  std::mt19937 rng(9);
  const int64_t n = 24;
  for (int64_t k : {80, 72})  // k parts of 40 and 36 (a tail of 4)
    for (int64_t groups : {1, 2})
      for (Fp8Layout layout : {Fp8Layout::RowMajor, Fp8Layout::Rows8x32})
        for (int64_t m : {1, 2, 4, 7, 13}) {  // GEMV, batched GEMV, GEMM
          const auto qw = octet_test::random_finite_e4m3(rng, n * k);
          auto qa = octet_test::random_finite_e4m3(rng, m * k);
          const std::vector<float> sa(static_cast<size_t>(m), 0.5f), sw(n, 0.25f);
          const auto clean = avx2_linear(qa, sa, qw, sw, m, n, k, groups, layout);
          const int64_t r0 = m / 2, r1 = m - 1;
          qa[r0 * k + k - 3] = 0x7F;  // in the last part's tail when k = 72
          qa[r1 * k + 1] = 0xFF;
          const auto y = avx2_linear(qa, sa, qw, sw, m, n, k, groups, layout);
          INFO("k " << k << " groups " << groups << " rows8x32 "
                    << (layout == Fp8Layout::Rows8x32) << " m " << m);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const size_t at = static_cast<size_t>(i * n + j);
              if (i == r0 || i == r1)
                CHECK(std::isnan(y[at]));
              else
                CHECK(std::memcmp(&y[at], &clean[at], sizeof(float)) == 0);
            }
        }
}

TEST_CASE("rows8x32: the cpu backend packs FP8 weights for the avx2 path", "[w8a8][rows8x32]") {
  auto be = make_cpu_backend();
  const int64_t n = 12, k = 64;
  std::mt19937 rng(3);
  const auto qw = octet_test::random_finite_e4m3(rng, n * k);
  Fp8Layout layout = Fp8Layout::RowMajor;
  const Buffer b = be->upload_fp8_weight(qw.data(), n, k, 2, &layout);
  CHECK(layout == w8a8_preferred_layout());
  std::vector<uint8_t> want = qw;
  if (layout == Fp8Layout::Rows8x32) {
    want.assign(static_cast<size_t>(fp8_rows8x32_bytes(n, k, 2)), 0);
    pack_fp8_rows8x32(qw.data(), n, k, 2, want.data());
    CHECK(fp8_avx2_available());
  }
  REQUIRE(b.bytes() == static_cast<int64_t>(want.size()));
  CHECK(std::memcmp(b.data(), want.data(), want.size()) == 0);
}
