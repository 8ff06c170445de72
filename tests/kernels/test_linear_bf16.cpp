// linear_bf16 (each path: scalar, AVX2, AVX-512) against the plain reference and against exact
// small sums; the Rows8x8 layout (pack_bf16_rows8x8) against the row-major AVX2 path, bit for
// bit, and the CPU backend's upload of BF16 weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/linear_bf16.h"

using namespace octet;

TEST_CASE("linear_bf16: exact on small integers", "[linear_bf16]") {
  // W = [[1, 2, 3], [-1, 0.5, 0]] in bf16 (all exact), x = [[1, 1, 1], [2, 0, -4]]
  const std::vector<float> wf{1, 2, 3, -1, 0.5f, 0};
  std::vector<uint16_t> w;
  for (float v : wf) w.push_back(float_to_bf16(v));
  const std::vector<float> x{1, 1, 1, 2, 0, -4};
  std::vector<float> y(4);
  linear_bf16(x.data(), w.data(), y.data(), 2, 2, 3);
  CHECK(y == std::vector<float>{6, -0.5f, -10, -2});
}

// Catch2 v2 has no SKIP: exit 77, which CTest reports as skipped (SKIP_RETURN_CODE).
[[noreturn]] void skip(const char* why) {
  std::printf("SKIPPED: %s\n", why);
  std::fflush(stdout);
  std::exit(77);
}

using Bf16Path = void (*)(const float*, const uint16_t*, float*, int64_t, int64_t, int64_t);

void check_against_reference(Bf16Path path) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (int64_t m : {1, 3, 4, 5, 9})
    for (int64_t k : {7, 8, 16, 33, 64, 577}) {
      const int64_t n = 67;
      std::vector<float> x(m * k), y(m * n), yr(m * n), absdot(m * n, 0.0f);
      std::vector<uint16_t> w(n * k);
      for (auto& v : x) v = nd(rng);
      for (auto& v : w) v = float_to_bf16(nd(rng));
      path(x.data(), w.data(), y.data(), m, n, k);
      ref::linear_bf16(x.data(), w.data(), yr.data(), m, n, k);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float s = 0;
          for (int64_t t = 0; t < k; ++t) s += std::fabs(x[i * k + t] * bf16_to_float(w[j * k + t]));
          // Only the summation order differs: |error| <= k * 2^-24 * sum|terms| (x2 margin).
          const float tol = 2.0f * static_cast<float>(k) * 5.96e-8f * s + 1e-30f;
          INFO("m=" << m << " k=" << k << " i=" << i << " j=" << j);
          REQUIRE(std::fabs(y[i * n + j] - yr[i * n + j]) <= tol);
        }
    }
}

TEST_CASE("linear_bf16 matches the reference across shapes", "[linear_bf16]") {
  SECTION("dispatch") { check_against_reference(&linear_bf16); }
  SECTION("scalar") { check_against_reference(&linear_bf16_scalar); }
}

TEST_CASE("linear_bf16 avx2 path matches the reference", "[linear_bf16]") {
  if (!linear_bf16_avx2_available()) skip("this CPU lacks AVX2+FMA");
  check_against_reference(&linear_bf16_avx2);
}

TEST_CASE("linear_bf16 avx512 path matches the reference", "[linear_bf16]") {
  if (!linear_bf16_avx512_available()) skip("this CPU lacks AVX-512F");
  check_against_reference(&linear_bf16_avx512);
}

TEST_CASE("pack_bf16_rows8x8 puts each value where the layout says", "[linear_bf16][rows8x8]") {
  // 13 rows (a block of 8 and one of 5 + 3 zero rows), k = 21: 2 chunks of 8, a tail of 5.
  const int64_t n = 13, k = 21;
  std::vector<uint16_t> src(n * k);
  for (int64_t i = 0; i < n * k; ++i) src[i] = static_cast<uint16_t>(i + 1);  // never 0
  REQUIRE(bf16_rows8x8_elements(n, k) == 16 * k);
  std::vector<uint16_t> dst(static_cast<size_t>(bf16_rows8x8_elements(n, k)), 0xFFFF);
  pack_bf16_rows8x8(src.data(), n, k, dst.data());
  // Block 0, chunk 0: rows 0-7, values 0-7 each.
  for (int r = 0; r < 8; ++r)
    for (int t = 0; t < 8; ++t) CHECK(dst[r * 8 + t] == src[r * k + t]);
  // Block 0, chunk 1 starts at 64: row 3, value 10.
  CHECK(dst[64 + 3 * 8 + 2] == src[3 * k + 10]);
  // Block 0's tails after its 2 chunks (128 values): row 6's 5 tail values.
  for (int t = 0; t < 5; ++t) CHECK(dst[128 + 6 * 5 + t] == src[6 * k + 16 + t]);
  // Block 1 (rows 8-12) at 8 k: row 12 = block row 4, chunk 1, value 9; its tail value 20.
  CHECK(dst[8 * k + 64 + 4 * 8 + 1] == src[12 * k + 9]);
  CHECK(dst[8 * k + 128 + 4 * 5 + 4] == src[12 * k + 20]);
  // Padding rows 13-15 are zero; every source value appears exactly once.
  for (int t = 0; t < 8; ++t) CHECK(dst[8 * k + 64 + 7 * 8 + t] == 0);
  CHECK(dst[8 * k + 128 + 5 * 5] == 0);
  std::vector<int> seen(n * k + 1, 0);
  for (uint16_t v : dst) ++seen[v];
  CHECK(seen[0] == 3 * k);
  for (int64_t i = 1; i <= n * k; ++i) CHECK(seen[i] == 1);
}

TEST_CASE("linear_bf16_rows8x8 gives linear_bf16_avx2's bits", "[linear_bf16][rows8x8]") {
  if (!linear_bf16_avx2_available()) skip("this CPU lacks AVX2+FMA");
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  struct Shape { int64_t n, k; };
  // Blocks of 8 rows with and without a last partial block, tails of k % 8 = 0 ... 7, and
  // shapes large enough to run on the thread team (n * k * m > 65536).
  for (const Shape sh : {Shape{1, 8}, Shape{7, 7}, Shape{8, 16}, Shape{9, 33}, Shape{10, 10},
                         Shape{11, 19}, Shape{12, 44}, Shape{13, 13}, Shape{17, 30},
                         Shape{67, 64}, Shape{100, 577}, Shape{1003, 576}, Shape{300, 2048}})
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9}) {
      const int64_t n = sh.n, k = sh.k;
      std::vector<float> x(m * k), want(m * n), got(m * n, -1.0f);
      std::vector<uint16_t> w(n * k);
      for (auto& v : x) v = nd(rng);
      for (auto& v : w) v = float_to_bf16(nd(rng));
      if (n > 3 && k > 3) {  // NaN and infinity stay in their own outputs
        w[2 * k + 1] = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
        w[3 * k + k - 1] = float_to_bf16(std::numeric_limits<float>::infinity());
      }
      std::vector<uint16_t> packed(static_cast<size_t>(bf16_rows8x8_elements(n, k)));
      pack_bf16_rows8x8(w.data(), n, k, packed.data());
      linear_bf16_avx2(x.data(), w.data(), want.data(), m, n, k);
      linear_bf16_rows8x8(x.data(), packed.data(), got.data(), m, n, k);
      INFO("n " << n << " k " << k << " m " << m);
      REQUIRE(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("the cpu backend uploads BF16 weights in linear_bf16's preferred layout",
          "[linear_bf16][rows8x8]") {
  auto be = make_cpu_backend();
  // n past the upload's 1024-row chunks and not a multiple of 8; k with a tail of 5.
  const int64_t n = 1029, k = 45, m = 3;
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<uint16_t> w(n * k);
  for (auto& v : w) v = float_to_bf16(nd(rng));
  std::vector<float> x(m * k);
  for (auto& v : x) v = nd(rng);
  Bf16Layout layout = Bf16Layout::RowMajor;
  const Buffer b = be->upload_bf16_weight(w.data(), n, k, &layout);
  CHECK(layout == linear_bf16_preferred_layout());
  CHECK(layout == (linear_bf16_avx2_available() && !linear_bf16_avx512_available()
                       ? Bf16Layout::Rows8x8
                       : Bf16Layout::RowMajor));
  std::vector<uint16_t> want = w;
  if (layout == Bf16Layout::Rows8x8) {
    want.assign(static_cast<size_t>(bf16_rows8x8_elements(n, k)), 0);
    pack_bf16_rows8x8(w.data(), n, k, want.data());
  }
  REQUIRE(b.bytes() == static_cast<int64_t>(want.size() * 2));
  CHECK(std::memcmp(b.data(), want.data(), want.size() * 2) == 0);
  // Backend::linear reads it in that layout: linear_bf16 on the row-major weight, bit for bit.
  WeightRef ref;
  ref.data = b.data();
  ref.dtype = DType::BF16;
  ref.n = n;
  ref.k = k;
  ref.bf16_layout = layout;
  std::vector<float> got(m * n), plain(m * n);
  be->linear(x.data(), m, ref, got.data());
  linear_bf16(x.data(), w.data(), plain.data(), m, n, k);
  CHECK(std::memcmp(got.data(), plain.data(), got.size() * sizeof(float)) == 0);
}
