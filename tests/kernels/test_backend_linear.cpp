// The GEMM ops of kernels/backend.h (linear with F32 and BF16 weights, linear_w8a8, its k-part
// partials and combine, batch invariance) against double-precision host references, on every
// backend (backend_test_support.h), in the three shape classes of the CUDA backend's paths
// (cuBLASLt-eligible, F32-only, simt_gemm). The other ops: test_backend_ops.cpp, whose file
// comment states the tolerance conventions (|y - y_ref| <= c * eps * sum |terms|, eps = 2^-23).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"
#include "kernels/minifloat_reference.h"
#include "kernels/mismatch_log.h"

using namespace octet;
using octet_test::DeviceArray;
using octet_test::device_zeros;
using octet_test::MismatchLog;
using octet_test::to_device;
using octet_test::to_host;

using namespace octet_test;

namespace {

// ---- linear (F32, BF16) -------------------------------------------------------------------------

struct LinearShape {
  int64_t m, n, k;
};
// Three shape classes, so that the cuda backend runs each GEMM path it has:
//  - cuBLASLt-eligible for every input type (k % 16 == 0, n % 4 == 0: F32 and FP8 W8A8 run on
//    cuBLASLt; BF16 weights always run on simt_gemm): m = 1, 3, 17, 300;
//  - eligible for F32 only (k % 4 == 0, k % 16 != 0) or refused for n % 4 != 0 with a k cuBLASLt
//    would take;
//  - refused (odd k, tails of 8/16/32): simt_gemm everywhere.
constexpr LinearShape kLinearShapes[] = {
    {1, 64, 64},  {3, 96, 128}, {17, 64, 128}, {300, 96, 64},    // cuBLASLt
    {7, 64, 72},  {5, 70, 128},                                   // F32 only / n % 4
    {1, 37, 45},  {5, 70, 133}, {17, 19, 67},  {3, 5, 7}, {2, 3, 1}, {33, 130, 515}};  // simt

// FP32 accumulation in any order (lanes, tiles, FMA): |err| <= k u sum |x w| (Higham, recursive
// and blocked sums); the bias add one more rounding: |y - ref| <= (k + 2) eps (sum |x w| + |b|).
void linear_case(Backend& be) {
  std::mt19937 rng(8);
  for (const LinearShape s : kLinearShapes) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (bool with_bias : {false, true}) {
        CAPTURE(s.m, s.n, s.k, dtype_name(dtype), with_bias);
        const std::vector<float> x = uniform(rng, s.m * s.k, -2, 2);
        std::vector<float> w = uniform(rng, s.n * s.k, -1, 1);
        std::vector<uint16_t> w_bf16(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          w_bf16[i] = ref_bf16(w[i]);
          if (dtype == DType::BF16) w[i] = std::bit_cast<float>(uint32_t{w_bf16[i]} << 16);
        }
        const std::vector<float> bias = uniform(rng, s.n, -4, 4);
        const auto d_x = to_device(be, x);
        const auto d_w = to_device(be, w);
        const auto d_w_bf16 = to_device(be, w_bf16);
        const auto d_bias = to_device(be, bias);
        auto d_y = device_zeros<float>(be, s.m * s.n);
        WeightRef ref_w;
        ref_w.data = dtype == DType::F32 ? static_cast<const void*>(d_w.data()) : d_w_bf16.data();
        ref_w.dtype = dtype;
        ref_w.n = s.n;
        ref_w.k = s.k;
        ref_w.bias = with_bias ? d_bias.data() : nullptr;
        be.linear(d_x.data(), s.m, ref_w, d_y.data());
        std::vector<double> ref(s.m * s.n), tol(s.m * s.n);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t o = 0; o < s.n; ++o) {
            double acc = 0, mag = 0;
            for (int64_t j = 0; j < s.k; ++j) {
              const double t = double(x[i * s.k + j]) * w[o * s.k + j];
              acc += t;
              mag += std::fabs(t);
            }
            const double b = with_bias ? bias[o] : 0.0;
            ref[i * s.n + o] = acc + b;
            tol[i * s.n + o] = double(s.k + 2) * kEps * (mag + std::fabs(b));
          }
        check_close(to_host(be, d_y), ref, tol, "linear");
      }
    }
  }
}
BACKEND_TEST_CASE("linear F32 and BF16 weights with and without bias", linear_case)

// ---- linear_w8a8 --------------------------------------------------------------------------------

// A product of two E4M3 values is exact in FP32 (4-bit significands, exponents >= -18), so only
// the FP32 sum's order and the three final roundings (a_scale * s_w, the scaling, + bias) differ:
// |y - ref| <= (k + 4) eps (|a_scale s_w| sum |qa qw| + |b|), plus, where the sum runs on FP8
// tensor cores, tc_rel |a_scale s_w| sum |qa qw| (fp8_tensor_core_rel, backend_op_reference.h).
// The float64 reference of linear_w8a8 and its bound (above), per output: ref, tol: [m, n].
void w8a8_reference(const std::vector<uint8_t>& qa, const std::vector<uint8_t>& qw,
                    const std::vector<float>& a_scale, bool a_per_row,
                    const std::vector<float>& w_scale, bool w_per_row,
                    const std::vector<float>* bias, int64_t m, int64_t n, int64_t k,
                    std::vector<double>& ref, std::vector<double>& tol, double tc_rel = 0.0) {
  const std::vector<double>& v = e4m3_values();
  ref.assign(m * n, 0.0);
  tol.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0, mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double t = v[qa[i * k + j]] * v[qw[o * k + j]];
        acc += t;
        mag += std::fabs(t);
      }
      const double sc = double(a_scale[a_per_row ? i : 0]) * w_scale[w_per_row ? o : 0];
      const double b = bias ? (*bias)[o] : 0.0;
      ref[i * n + o] = acc * sc + b;
      tol[i * n + o] =
          double(k + 4) * kEps * (mag * std::fabs(sc) + std::fabs(b)) + tc_rel * mag * std::fabs(sc);
    }
}

void linear_w8a8_case(Backend& be) {
  std::mt19937 rng(9);
  for (const LinearShape s : kLinearShapes) {
    for (ScaleGranularity w_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
      for (ScaleGranularity a_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
        for (bool with_bias : {false, true}) {
          const bool a_dynamic = a_gran == ScaleGranularity::PerRow;
          CAPTURE(s.m, s.n, s.k, w_gran == ScaleGranularity::PerRow, a_dynamic, with_bias);
          const std::vector<uint8_t> qa = random_e4m3_codes(rng, s.m * s.k);
          const std::vector<uint8_t> qw = random_e4m3_codes(rng, s.n * s.k);
          const std::vector<float> w_scale =
              uniform(rng, w_gran == ScaleGranularity::PerRow ? s.n : 1, 1e-3f, 1e-2f);
          const std::vector<float> a_scale = uniform(rng, a_dynamic ? s.m : 1, 1e-3f, 3e-2f);
          const std::vector<float> bias = uniform(rng, s.n, -4, 4);
          const auto d_qa = to_device(be, qa);
          const auto d_qw = to_device(be, qw);
          const auto d_ws = to_device(be, w_scale);
          const auto d_as = to_device(be, a_scale);
          const auto d_bias = to_device(be, bias);
          auto d_y = device_zeros<float>(be, s.m * s.n);
          WeightRef w{d_qw.data(), DType::FP8_E4M3, s.n, s.k, d_ws.data(), w_gran,
                      with_bias ? d_bias.data() : nullptr};
          be.linear_w8a8(d_qa.data(), d_as.data(), a_gran, s.m, w, d_y.data());
          std::vector<double> ref, tol;
          w8a8_reference(qa, qw, a_scale, a_dynamic, w_scale, w_gran == ScaleGranularity::PerRow,
                         with_bias ? &bias : nullptr, s.m, s.n, s.k, ref, tol,
                         fp8_tensor_core_rel(be, s.k));
          check_close(to_host(be, d_y), ref, tol, "linear_w8a8");
        }
      }
    }
  }
}
BACKEND_TEST_CASE("linear_w8a8 per-row and per-tensor weight and activation scales",
                  linear_w8a8_case)

// ---- linear_w8a8 in k parts: partials, combine, TP shards ---------------------------------------

// A row-parallel FP8 layer (WeightRef::k_groups = G): the fused op keeps linear_w8a8's bound (a
// sum of k exact products in any order, parts included: (k + 4) eps as above, plus the tensor-core
// term where it runs there), with per-row and per-tensor scales, with and without bias;
// partials + combine equal the fused op bit for bit where exact_k_parts() (the contract: the same
// parts added in the same order), and elsewhere the fused op ignores the parts (the bits of
// k_groups 1); and a rank's column shard (k / N columns, G / N parts) gives exactly the whole
// weight's parts [r G / N, (r + 1) G / N), so the gathered parts combine to TP 1's bits. Shapes:
// k / G a multiple of 16 and n % 4 == 0 (cuBLASLt on the cuda backend), k a multiple of 16 but
// k / G not, and neither (simt_gemm).
void linear_w8a8_parts_case(Backend& be) {
  std::mt19937 rng(15);
  struct Shape {
    int64_t m, n, k, groups;
  };
  for (const Shape s : {Shape{1, 64, 256, 4}, Shape{3, 96, 128, 2}, Shape{17, 64, 192, 3},
                        Shape{300, 96, 128, 2}, Shape{5, 64, 96, 4}, Shape{1, 37, 168, 12},
                        Shape{5, 20, 168, 3}, Shape{9, 33, 576, 3}, Shape{17, 16, 172, 4}}) {
    CAPTURE(s.m, s.n, s.k, s.groups);
    const std::vector<uint8_t> qa = random_e4m3_codes(rng, s.m * s.k);
    const std::vector<uint8_t> qw = random_e4m3_codes(rng, s.n * s.k);
    const std::vector<float> w_scale = uniform(rng, s.n, 1e-3f, 1e-2f);
    const std::vector<float> a_scale = uniform(rng, s.m, 1e-3f, 3e-2f);
    const std::vector<float> bias = uniform(rng, s.n, -4, 4);
    const auto d_qa = to_device(be, qa);
    const auto d_qw = to_device(be, qw);
    const auto d_ws = to_device(be, w_scale);
    const auto d_as = to_device(be, a_scale);
    const auto d_bias = to_device(be, bias);
    WeightRef w{d_qw.data(), DType::FP8_E4M3, s.n, s.k, d_ws.data(), ScaleGranularity::PerRow,
                d_bias.data(), s.groups};
    auto d_parts = device_zeros<float>(be, s.groups * s.m * s.n);
    be.linear_w8a8_partials(d_qa.data(), s.m, w, d_parts.data());
    const std::vector<float> parts = to_host(be, d_parts);
    {  // each part sum against float64: kg exact products in any order
      const std::vector<double>& v = e4m3_values();
      const int64_t kg = s.k / s.groups;
      std::vector<double> pref(parts.size()), ptol(parts.size());
      for (int64_t g = 0; g < s.groups; ++g)
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t o = 0; o < s.n; ++o) {
            double acc = 0, mag = 0;
            for (int64_t t = g * kg; t < (g + 1) * kg; ++t) {
              const double p = v[qa[i * s.k + t]] * v[qw[o * s.k + t]];
              acc += p;
              mag += std::fabs(p);
            }
            pref[(g * s.m + i) * s.n + o] = acc;
            ptol[(g * s.m + i) * s.n + o] =
                (double(kg + 2) * kEps + fp8_tensor_core_rel(be, kg)) * mag;
          }
      check_close(parts, pref, ptol, "linear_w8a8_partials");
    }
    auto d_y = device_zeros<float>(be, s.m * s.n);
    auto d_y2 = device_zeros<float>(be, s.m * s.n);
    for (ScaleGranularity w_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
      for (ScaleGranularity a_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
        for (bool with_bias : {true, false}) {
          const bool w_rows = w_gran == ScaleGranularity::PerRow;
          const bool a_rows = a_gran == ScaleGranularity::PerRow;
          CAPTURE(w_rows, a_rows, with_bias);
          WeightRef wg = w;
          wg.granularity = w_gran;  // per tensor: w_scale[0]
          wg.bias = with_bias ? d_bias.data() : nullptr;
          be.linear_w8a8(d_qa.data(), d_as.data(), a_gran, s.m, wg, d_y.data());
          const std::vector<float> y = to_host(be, d_y);
          std::vector<double> ref, tol;
          w8a8_reference(qa, qw, a_scale, a_rows, w_scale, w_rows, with_bias ? &bias : nullptr,
                         s.m, s.n, s.k, ref, tol, fp8_tensor_core_rel(be, s.k));
          check_close(y, ref, tol, "linear_w8a8 k parts");
          if (be.exact_k_parts()) {
            be.linear_w8a8_combine(d_parts.data(), s.groups, d_as.data(), a_gran, s.m, wg,
                                   d_y2.data());
            check_identical(to_host(be, d_y2), y, "combine(partials) vs linear_w8a8");
          } else {  // one GEMM over all of k: k_groups changes nothing
            WeightRef whole = wg;
            whole.k_groups = 1;
            be.linear_w8a8(d_qa.data(), d_as.data(), a_gran, s.m, whole, d_y2.data());
            check_identical(to_host(be, d_y2), y, "linear_w8a8 in k groups vs one group");
          }
        }
      }
    }

    for (int64_t world = 2; world <= s.groups; ++world) {
      if (s.groups % world != 0) continue;
      CAPTURE(world);
      const int64_t kr = s.k / world, gr = s.groups / world;
      std::vector<float> gathered;
      for (int64_t r = 0; r < world; ++r) {
        std::vector<uint8_t> qa_r(s.m * kr), qw_r(s.n * kr);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t t = 0; t < kr; ++t) qa_r[i * kr + t] = qa[i * s.k + r * kr + t];
        for (int64_t o = 0; o < s.n; ++o)
          for (int64_t t = 0; t < kr; ++t) qw_r[o * kr + t] = qw[o * s.k + r * kr + t];
        const auto d_qa_r = to_device(be, qa_r);
        const auto d_qw_r = to_device(be, qw_r);
        WeightRef w_r{d_qw_r.data(), DType::FP8_E4M3, s.n, kr, d_ws.data(),
                      ScaleGranularity::PerRow, d_bias.data(), gr};
        auto d_p = device_zeros<float>(be, gr * s.m * s.n);
        be.linear_w8a8_partials(d_qa_r.data(), s.m, w_r, d_p.data());
        const std::vector<float> p = to_host(be, d_p);
        gathered.insert(gathered.end(), p.begin(), p.end());
      }
      CHECK(gathered == parts);
    }
  }
}
BACKEND_TEST_CASE("linear_w8a8 in k parts: partials + combine and TP shards are bit-identical",
                  linear_w8a8_parts_case)

// ---- Batch invariance of linear and linear_w8a8 -------------------------------------------------

// Row i of an m = 17 batch is bit-identical to the same row run alone (m = 1): the contract's
// batch invariance (each output's FP32 sum is the same instruction sequence whatever m is), on a
// shape every GEMM path refuses (simt_gemm) and one cuBLASLt takes (k % 16 == 0, n % 4 == 0).
// test_cuda_backend.cpp covers more m (2 ... 300 and past LtGemm's max_rows).
void linear_batch_invariance_shape(Backend& be, int64_t n, int64_t k) {
  CAPTURE(n, k);
  std::mt19937 rng(10);
  const int64_t m = 17;
  const std::vector<float> x = uniform(rng, m * k, -2, 2);
  const std::vector<float> w = uniform(rng, n * k, -1, 1);
  std::vector<uint16_t> w_bf16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w_bf16[i] = ref_bf16(w[i]);
  const std::vector<float> bias = uniform(rng, n, -1, 1);
  const std::vector<uint8_t> qa = random_e4m3_codes(rng, m * k);
  const std::vector<uint8_t> qw = random_e4m3_codes(rng, n * k);
  const std::vector<float> w_scale = uniform(rng, n, 1e-3f, 1e-2f);
  const std::vector<float> a_scale = uniform(rng, m, 1e-3f, 3e-2f);
  const auto d_x = to_device(be, x);
  const auto d_w = to_device(be, w);
  const auto d_w_bf16 = to_device(be, w_bf16);
  const auto d_bias = to_device(be, bias);
  const auto d_qa = to_device(be, qa);
  const auto d_qw = to_device(be, qw);
  const auto d_ws = to_device(be, w_scale);
  const auto d_as = to_device(be, a_scale);
  auto d_y = device_zeros<float>(be, m * n);
  auto d_y1 = device_zeros<float>(be, n);
  auto d_row = device_zeros<float>(be, k);      // row i alone, in its own buffer
  auto d_qrow = device_zeros<uint8_t>(be, k);
  auto d_srow = device_zeros<float>(be, 1);

  auto compare = [&](const std::string& what, auto run_one) {
    const std::vector<float> all = to_host(be, d_y);
    MismatchLog log;
    for (int64_t i = 0; i < m; ++i) {
      run_one(i);
      const std::vector<float> one = to_host(be, d_y1);
      for (int64_t o = 0; o < n; ++o)
        if (bits_of(one[o]) != bits_of(all[i * n + o]))
          log.add("row %lld out %lld: m=17 %a, m=1 %a", static_cast<long long>(i),
                  static_cast<long long>(o), all[i * n + o], one[o]);
    }
    INFO(what << ": " << log.summary());
    CHECK(log.count() == 0);
  };
  for (DType dtype : {DType::F32, DType::BF16}) {
    WeightRef wr{dtype == DType::F32 ? static_cast<const void*>(d_w.data()) : d_w_bf16.data(),
                 dtype, n, k, nullptr, ScaleGranularity::PerRow, d_bias.data()};
    be.linear(d_x.data(), m, wr, d_y.data());
    compare(std::string("linear ") + dtype_name(dtype), [&](int64_t i) {
      be.upload(d_row.buffer, 0, x.data() + i * k, k * 4);
      be.linear(d_row.data(), 1, wr, d_y1.data());
    });
  }
  for (ScaleGranularity a_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
    const bool a_dynamic = a_gran == ScaleGranularity::PerRow;
    WeightRef wr{d_qw.data(), DType::FP8_E4M3, n, k, d_ws.data(), ScaleGranularity::PerRow,
                 d_bias.data()};
    be.linear_w8a8(d_qa.data(), d_as.data(), a_gran, m, wr, d_y.data());
    compare(a_dynamic ? "linear_w8a8 dynamic" : "linear_w8a8 static", [&](int64_t i) {
      be.upload(d_qrow.buffer, 0, qa.data() + i * k, k);
      be.upload(d_srow.buffer, 0, a_scale.data() + (a_dynamic ? i : 0), 4);
      be.linear_w8a8(d_qrow.data(), d_srow.data(), a_gran, 1, wr, d_y1.data());
    });
  }
}
void linear_batch_invariance_case(Backend& be) {
  linear_batch_invariance_shape(be, 37, 133);
  linear_batch_invariance_shape(be, 64, 128);
}
BACKEND_TEST_CASE("linear and linear_w8a8 are batch invariant m=1 vs m=17",
                  linear_batch_invariance_case)

}  // namespace
