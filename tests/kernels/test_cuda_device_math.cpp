// The __host__ __device__ math of the CUDA kernels (kernels/cuda/device_math.h), run on the host
// by the host compiler: no GPU and no nvcc needed, so it runs in every CI build. Oracles, never
// the code under test: cuda_fp8.h / cuda_bf16.h / cuda_fp16.h host conversions (where the CUDA
// toolkit headers were found, OCTET_HAVE_CUDA_FP8_H), the independent minifloat reference
// (tests/kernels/minifloat_reference.h) everywhere, and float64 for the softmax and scale math.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cuda/device_math.h"
#include "kernels/fp8_test_values.h"
#include "kernels/minifloat_reference.h"
#include "kernels/mismatch_log.h"

#if OCTET_HAVE_CUDA_FP8_H
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace cm = octet::cuda_math;
using octet_test::MismatchLog;

namespace {

constexpr double kEps = 0x1p-23;  // 2u, u = FP32 unit roundoff (as test_backend_ops.cpp)
constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// What a decoder must return for a code: the exact value, or 0x7FFFFFFF for NaN codes.
uint32_t expected_decode_bits(const octet_test::MiniFloat& f, uint8_t code) {
  if (f.is_nan(code)) return 0x7FFFFFFFu;
  return bits(static_cast<float>(octet_test::code_value(f, code)));
}

}  // namespace

// ---- FP8 ------------------------------------------------------------------------------------

TEST_CASE("cuda device math: FP8 encode equals the reference on 13M stress values",
          "[cuda_device_math][fp8]") {
  const std::vector<float>& xs = octet_test::fp8_stress_floats();
  MismatchLog e4m3_log, e5m2_log;
  for (float x : xs) {
    const uint8_t r4 = octet_test::reference_fp8(octet_test::kE4M3, static_cast<double>(x));
    const uint8_t r5 = octet_test::reference_fp8(octet_test::kE5M2, static_cast<double>(x));
    const uint8_t g4 = cm::e4m3_from_float(x), g5 = cm::e5m2_from_float(x);
    if (g4 != r4) e4m3_log.add("0x%08X: expected 0x%02X, got 0x%02X", bits(x), r4, g4);
    if (g5 != r5) e5m2_log.add("0x%08X: expected 0x%02X, got 0x%02X", bits(x), r5, g5);
  }
  INFO("E4M3: " << e4m3_log.summary());
  CHECK(e4m3_log.count() == 0);
  INFO("E5M2: " << e5m2_log.summary());
  CHECK(e5m2_log.count() == 0);
}

TEST_CASE("cuda device math: FP8 decode of all 256 codes is exact", "[cuda_device_math][fp8]") {
  MismatchLog log;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const uint32_t want4 = expected_decode_bits(octet_test::kE4M3, code);
    const uint32_t want5 = expected_decode_bits(octet_test::kE5M2, code);
    if (bits(cm::e4m3_to_float(code)) != want4)
      log.add("E4M3 0x%02X: expected 0x%08X, got 0x%08X", c, want4, bits(cm::e4m3_to_float(code)));
    if (bits(cm::e5m2_to_float(code)) != want5)
      log.add("E5M2 0x%02X: expected 0x%08X, got 0x%08X", c, want5, bits(cm::e5m2_to_float(code)));
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
}

// Every E4M3 value is a BF16 value (3 mantissa bits, exponents -9..8): the sm_80 W8A16 path
// widens both GEMM operands exactly.
TEST_CASE("cuda device math: E4M3 -> BF16 widening is exact", "[cuda_device_math][fp8]") {
  for (int c = 0; c < 256; ++c) {
    const float v = cm::e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) continue;
    INFO("code " << c);
    CHECK(bits(cm::bf16_to_float(cm::bf16_from_float(v))) == bits(v));
  }
}

#if OCTET_HAVE_CUDA_FP8_H

TEST_CASE("cuda device math: FP8 and 16-bit conversions equal the cuda_*.h host conversions",
          "[cuda_device_math][fp8][cuda_fp8_h]") {
  const std::vector<float>& xs = octet_test::fp8_stress_floats();
  MismatchLog log;
  for (float x : xs) {
    const uint8_t o4 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    const uint8_t o5 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    if (cm::e4m3_from_float(x) != o4)
      log.add("E4M3 0x%08X: cuda_fp8.h 0x%02X, got 0x%02X", bits(x), o4, cm::e4m3_from_float(x));
    if (cm::e5m2_from_float(x) != o5)
      log.add("E5M2 0x%08X: cuda_fp8.h 0x%02X, got 0x%02X", bits(x), o5, cm::e5m2_from_float(x));
    const uint16_t ob = static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
    const uint16_t oh = static_cast<__half_raw>(__float2half_rn(x)).x;
    if (!std::isnan(x) && cm::bf16_from_float(x) != ob)
      log.add("bf16 0x%08X: cuda_bf16.h 0x%04X, got 0x%04X", bits(x), ob, cm::bf16_from_float(x));
    if (!std::isnan(x) && cm::fp16_from_float(x) != oh)
      log.add("fp16 0x%08X: cuda_fp16.h 0x%04X, got 0x%04X", bits(x), oh, cm::fp16_from_float(x));
    if (std::isnan(x) && (cm::bf16_from_float(x) != 0x7FFF || cm::fp16_from_float(x) != 0x7FFF))
      log.add("NaN 0x%08X: expected 0x7FFF", bits(x));
  }
  for (int c = 0; c < 256; ++c) {
    __nv_fp8_e4m3 v4;
    v4.__x = static_cast<__nv_fp8_storage_t>(c);
    __nv_fp8_e5m2 v5;
    v5.__x = static_cast<__nv_fp8_storage_t>(c);
    const uint32_t o4 = bits(static_cast<float>(v4)), o5 = bits(static_cast<float>(v5));
    if (bits(cm::e4m3_to_float(static_cast<uint8_t>(c))) != o4)
      log.add("E4M3 decode 0x%02X: cuda_fp8.h 0x%08X", c, o4);
    if (bits(cm::e5m2_to_float(static_cast<uint8_t>(c))) != o5)
      log.add("E5M2 decode 0x%02X: cuda_fp8.h 0x%08X", c, o5);
  }
  for (uint32_t h = 0; h < 65536; ++h) {  // every 16-bit pattern decodes as the headers do
    const auto u = static_cast<uint16_t>(h);
    __nv_bfloat16_raw rb;
    rb.x = u;
    __half_raw rh;
    rh.x = u;
    const float ob = __bfloat162float(__nv_bfloat16(rb));
    const float oh = __half2float(__half(rh));
    const bool ok_b = std::isnan(ob) ? std::isnan(cm::bf16_to_float(u)) : bits(ob) == bits(cm::bf16_to_float(u));
    const bool ok_h = std::isnan(oh) ? std::isnan(cm::fp16_to_float(u)) : bits(oh) == bits(cm::fp16_to_float(u));
    if (!ok_b) log.add("bf16 decode 0x%04X", h);
    if (!ok_h) log.add("fp16 decode 0x%04X", h);
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
}

#endif  // OCTET_HAVE_CUDA_FP8_H

// ---- Activation scales and the W8A8 epilogue ------------------------------------------------
// One FP32 operation computed in float64 and rounded to FP32 is the correctly rounded FP32
// result (float64 has more than 2 * 24 + 2 bits: no double-rounding error for + - * /), an
// oracle independent of the code under test.

float f64(double x) { return static_cast<float>(x); }

TEST_CASE("cuda device math: vLLM's dynamic and static activation quantization",
          "[cuda_device_math][scales]") {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> mag(-30.0f, 10.0f);
  MismatchLog log;
  for (int i = 0; i < 200000; ++i) {
    const float amax = i == 0 ? 0.0f : std::exp2(mag(rng));
    const float want_s = std::max(f64(double(amax) / 448.0), f64(1.0 / (448.0 * 512.0)));
    const float s = cm::dynamic_scale(amax);
    if (bits(s) != bits(want_s)) log.add("amax %a: scale %a, expected %a", amax, s, want_s);
    const float x = amax * (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, -(i % 7));
    const uint8_t want_q = octet_test::reference_fp8(octet_test::kE4M3, double(f64(double(x) / double(s))));
    if (cm::quantize_dynamic(x, s) != want_q) log.add("x %a s %a: code mismatch", x, s);
    const float inv = f64(1.0 / double(s));
    const uint8_t want_static = octet_test::reference_fp8(octet_test::kE4M3, double(f64(double(x) * double(inv))));
    if (cm::quantize_static(x, inv) != want_static) log.add("static x %a inv %a", x, inv);
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
  CHECK(cm::kMinActivationScale == f64(1.0 / (448.0 * 512.0)));
  CHECK(cm::quantize_dynamic(1e30f, 1.0f) == 0x7E);  // saturates to 448
  CHECK(cm::quantize_dynamic(std::numeric_limits<float>::quiet_NaN(), 1.0f) == 0x7F);
}

// y = acc * (a_scale * w_scale) + bias with each operation rounded once, in that order (the CPU
// order); without a bias, nothing is added.
TEST_CASE("cuda device math: W8A8 epilogue order and rounding", "[cuda_device_math][scales]") {
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), e(-12.0f, 0.0f);
  MismatchLog log;
  int differs_from_other_order = 0;
  for (int i = 0; i < 200000; ++i) {
    const float acc = u(rng) * 4000.0f, sa = std::exp2(e(rng)), sw = std::exp2(e(rng)) * (1 + u(rng) / 4);
    const float bias = u(rng) * 4.0f;
    const float s = f64(double(sa) * double(sw));
    const float scaled = f64(double(acc) * double(s));
    const float want = f64(double(scaled) + double(bias));
    const float got = cm::w8a8_epilogue(acc, sa, sw, true, bias);
    if (bits(got) != bits(want)) log.add("acc %a sa %a sw %a b %a: %a, expected %a", acc, sa, sw, bias, got, want);
    if (bits(cm::w8a8_epilogue(acc, sa, sw, false, bias)) != bits(scaled)) log.add("no bias: %a", acc);
    differs_from_other_order += bits(f64(double(f64(double(acc) * double(sa))) * double(sw))) != bits(scaled);
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
  CHECK(differs_from_other_order > 0);  // the order is observable, so the test pins it
  CHECK(bits(cm::w8a8_epilogue(-0.0f, 1.0f, 1.0f, false, 0.0f)) == bits(-0.0f));
}

// ---- Online softmax and the split-KV merge ---------------------------------------------------

namespace {

// float64 softmax-weighted sum of values v over scores s (masked: -inf).
std::vector<double> softmax_sum_f64(const std::vector<float>& s, const std::vector<std::vector<float>>& v) {
  double mx = -INFINITY;
  for (float x : s) mx = std::max(mx, double(x));
  double z = 0;
  std::vector<double> out(v[0].size(), 0.0);
  for (size_t t = 0; t < s.size(); ++t) {
    if (s[t] == -kInf) continue;
    const double p = std::exp(double(s[t]) - mx);
    z += p;
    for (size_t d = 0; d < out.size(); ++d) out[d] += p * v[t][d];
  }
  for (double& o : out) o /= z;
  return out;
}

struct State {
  float m = -kInf, l = 0.0f;
  std::vector<float> acc;
};

// The kernels' order: one online update per position.
State online(const std::vector<float>& s, const std::vector<std::vector<float>>& v, size_t b, size_t e) {
  State st;
  st.acc.assign(v[0].size(), 0.0f);
  for (size_t t = b; t < e; ++t) {
    const cm::SoftmaxStep step = cm::online_softmax_update(st.m, st.l, s[t]);
    for (size_t d = 0; d < st.acc.size(); ++d)
      st.acc[d] = st.acc[d] * step.alpha + step.p * v[t][d];
  }
  return st;
}

void merge_into(State& into, const State& part) {
  const cm::MergeFactors f = cm::softmax_merge(into.m, into.l, part.m, part.l);
  for (size_t d = 0; d < into.acc.size(); ++d) into.acc[d] = into.acc[d] * f.a + part.acc[d] * f.b;
}

// |o - ref| <= (2 n + 16) eps max|v| + score term: exp (2 ulp each), n FP32 additions to l and
// to acc (<= n u each, relative to the sums), the rescalings (one rounding per update each,
// compounding to <= n u) and the final division; scores are exact inputs here.
void check_against_f64(const State& st, const std::vector<float>& s,
                       const std::vector<std::vector<float>>& v, float vmax, const char* what) {
  const std::vector<double> ref = softmax_sum_f64(s, v);
  const double tol = (2.0 * double(s.size()) + 16) * kEps * vmax;
  for (size_t d = 0; d < ref.size(); ++d) {
    const float o = cm::softmax_output(st.acc[d], st.l, 1.0f);
    INFO(what << " d " << d << ": " << o << " vs " << ref[d] << " tol " << tol);
    REQUIRE(std::fabs(double(o) - ref[d]) <= tol);
  }
}

}  // namespace

TEST_CASE("cuda device math: online softmax and split-KV merge against float64",
          "[cuda_device_math][softmax]") {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t n : {size_t{1}, size_t{7}, size_t{512}, size_t{513}, size_t{5000}}) {
    for (float spread : {1.0f, 30.0f, 300.0f}) {
      CAPTURE(n, spread);
      std::vector<float> s(n);
      std::vector<std::vector<float>> v(n, std::vector<float>(5));
      for (size_t t = 0; t < n; ++t) {
        s[t] = u(rng) * spread;
        for (float& x : v[t]) x = u(rng) * 3.0f;
      }
      if (n > 3) s[1] = s[n - 2] = -kInf;  // masked positions (sliding window, causal)
      if (n > 3) s[0] = -kInf;             // a masked first position
      const State one = online(s, v, 0, n);
      check_against_f64(one, s, v, 3.0f, "one pass");
      // Partitions of 512 and of 7 positions (the kernels' split and warp interleaving), merged
      // in order, plus empty partitions, which must change nothing.
      for (size_t part : {size_t{512}, size_t{7}}) {
        State merged;
        merged.acc.assign(5, 0.0f);
        for (size_t b = 0; b < n; b += part) {
          merge_into(merged, online(s, v, b, std::min(n, b + part)));
          const State before = merged;
          State empty;
          empty.acc.assign(5, 0.0f);
          merge_into(merged, empty);
          REQUIRE(bits(merged.m) == bits(before.m));
          REQUIRE(bits(merged.l) == bits(before.l));
          for (size_t d = 0; d < 5; ++d) REQUIRE(bits(merged.acc[d]) == bits(before.acc[d]));
        }
        check_against_f64(merged, s, v, 3.0f, "merged");
      }
    }
  }
}

TEST_CASE("cuda device math: masked scores leave the softmax state bit-identical",
          "[cuda_device_math][softmax]") {
  float m = -kInf, l = 0.0f;
  cm::SoftmaxStep st = cm::online_softmax_update(m, l, -kInf);  // nothing seen yet
  CHECK(st.p == 0.0f);
  CHECK(m == -kInf);
  CHECK(l == 0.0f);
  st = cm::online_softmax_update(m, l, 2.5f);  // the first real score
  CHECK(st.alpha == 0.0f);
  CHECK(st.p == 1.0f);
  CHECK(m == 2.5f);
  CHECK(l == 1.0f);
  st = cm::online_softmax_update(m, l, -kInf);
  CHECK(st.alpha == 1.0f);
  CHECK(st.p == 0.0f);
  CHECK(m == 2.5f);
  CHECK(l == 1.0f);
  st = cm::online_softmax_update(m, l, 4.5f);  // a new maximum rescales the old sum
  CHECK(m == 4.5f);
  CHECK(std::fabs(double(st.alpha) - std::exp(-2.0)) <= 2 * kEps * std::exp(-2.0));
  CHECK(st.p == 1.0f);
  CHECK(cm::softmax_rescale(-kInf, -kInf) == 1.0f);
  CHECK(cm::softmax_weight(-kInf, -kInf) == 0.0f);
  CHECK(cm::softmax_output(6.0f, 3.0f, 0.5f) == 1.0f);
}
