// The fused ops of kernels/backend.h on every backend, each against the ops it replaces run
// separately on the same backend: rms_norm_quant_fp8, silu_mul_quant_fp8 (out aliasing gate),
// linear_w8a8_add_rms_norm and linear_w8a8_silu_quant (their output codes and scales written
// over their own input codes and scales, as the model runs them) bit for bit;
// linear_w8a8_multi over adjacent weights (one GEMM on CUDA) bit for bit where
// exact_k_parts(), else within the FP8 GEMM bound of test_backend_linear.cpp against float64. On the CPU the defaults compose the parts; on CUDA
// these check the fused kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"

using namespace octet;
using namespace octet_test;

namespace {

void rms_norm_quant_case(Backend& be) {
  std::mt19937 rng(31);
  for (const int64_t n : {int64_t{64}, int64_t{300}, int64_t{4096}})
    for (const bool with_delta : {true, false}) {
      CAPTURE(n, with_delta);
      const int64_t m = 5;
      const std::vector<float> x = uniform(rng, m * n, -4, 4), d = uniform(rng, m * n, -1, 1);
      const std::vector<float> w = uniform(rng, n, 0.5f, 1.5f);
      const auto d_d = to_device(be, d), d_w = to_device(be, w);
      std::vector<std::vector<float>> res, outs, scales;
      std::vector<std::vector<uint8_t>> codes;
      for (int fused = 0; fused < 2; ++fused) {
        auto d_x = to_device(be, x);
        auto out = device_zeros<float>(be, m * n), scale = device_zeros<float>(be, m);
        auto q = device_zeros<uint8_t>(be, m * n);
        const float* delta = with_delta ? d_d.data() : nullptr;
        if (fused) {
          be.rms_norm_quant_fp8(d_x.data(), delta, d_w.data(), out.data(), m, n, 1e-5f,
                                q.data(), scale.data());
        } else {
          be.rms_norm(d_x.data(), delta, d_w.data(), out.data(), m, n, 1e-5f);
          be.quantize_fp8_dynamic(out.data(), m, n, nullptr, q.data(), scale.data());
        }
        res.push_back(to_host(be, d_x));
        outs.push_back(to_host(be, out));
        scales.push_back(to_host(be, scale));
        codes.push_back(to_host(be, q));
      }
      check_identical(res[1], res[0], "residual");
      check_identical(outs[1], outs[0], "normed");
      check_identical(scales[1], scales[0], "scales");
      check_identical(codes[1], codes[0], "codes");
    }
}
BACKEND_TEST_CASE("rms_norm_quant_fp8 equals rms_norm then quantize_fp8_dynamic",
                  rms_norm_quant_case)

void silu_mul_quant_case(Backend& be) {
  std::mt19937 rng(32);
  for (const int64_t n : {int64_t{172}, int64_t{1536}}) {
    CAPTURE(n);
    const int64_t m = 4;
    const std::vector<float> g = uniform(rng, m * n, -6, 6), u = uniform(rng, m * n, -3, 3);
    const auto d_u = to_device(be, u);
    std::vector<std::vector<float>> outs, scales;
    std::vector<std::vector<uint8_t>> codes;
    for (int fused = 0; fused < 2; ++fused) {
      auto d_g = to_device(be, g);  // out aliases gate, as the model runs it
      auto scale = device_zeros<float>(be, m);
      auto q = device_zeros<uint8_t>(be, m * n);
      if (fused) {
        be.silu_mul_quant_fp8(d_g.data(), d_u.data(), d_g.data(), m, n, q.data(), scale.data());
      } else {
        be.silu_mul(d_g.data(), d_u.data(), d_g.data(), m, n);
        be.quantize_fp8_dynamic(d_g.data(), m, n, nullptr, q.data(), scale.data());
      }
      outs.push_back(to_host(be, d_g));
      scales.push_back(to_host(be, scale));
      codes.push_back(to_host(be, q));
    }
    check_identical(outs[1], outs[0], "silu * up");
    check_identical(scales[1], scales[0], "scales");
    check_identical(codes[1], codes[0], "codes");
  }
}
BACKEND_TEST_CASE("silu_mul_quant_fp8 equals silu_mul then quantize_fp8_dynamic",
                  silu_mul_quant_case)

// n = 64, k = 128: cuBLASLt's shapes on CUDA (the fused row kernel); n = 20, k = 168: simt_gemm
// (the composed fallback). Per-row (dynamic) and per-tensor (static) activation scales, with
// and without the output codes.
void linear_add_norm_case(Backend& be) {
  std::mt19937 rng(33);
  struct Shape {
    int64_t n, k;
  };
  for (const Shape s : {Shape{64, 128}, Shape{20, 168}})
    for (const bool per_row : {true, false})
      for (const bool quantize : {true, false}) {
        CAPTURE(s.n, s.k, per_row, quantize);
        const int64_t m = 6;
        const std::vector<uint8_t> qa = random_e4m3_codes(rng, m * s.k);
        const std::vector<uint8_t> qw = random_e4m3_codes(rng, s.n * s.k);
        const std::vector<float> ws = uniform(rng, s.n, 1e-3f, 1e-2f);
        const std::vector<float> as = uniform(rng, per_row ? m : 1, 1e-3f, 3e-2f);
        const std::vector<float> bias = uniform(rng, s.n, -1, 1);
        const std::vector<float> x = uniform(rng, m * s.n, -3, 3);
        const std::vector<float> nw = uniform(rng, s.n, 0.5f, 1.5f);
        const auto d_qw = to_device(be, qw);
        const auto d_ws = to_device(be, ws), d_bias = to_device(be, bias);
        const auto d_nw = to_device(be, nw);
        const WeightRef w{d_qw.data(), DType::FP8_E4M3, s.n, s.k, d_ws.data(),
                          ScaleGranularity::PerRow, d_bias.data()};
        const ScaleGranularity g =
            per_row ? ScaleGranularity::PerRow : ScaleGranularity::PerTensor;
        std::vector<std::vector<float>> ys, res, outs, scales;
        std::vector<std::vector<uint8_t>> codes;
        for (int fused = 0; fused < 2; ++fused) {
          // qa / a_scale sized for both the input (k) and the output codes (n), as act.qa.
          std::vector<uint8_t> qa_buf(static_cast<size_t>(m * std::max(s.k, s.n)), 0);
          std::copy(qa.begin(), qa.end(), qa_buf.begin());
          auto d_qa = to_device(be, qa_buf);
          auto d_as = to_device(be, as), d_x = to_device(be, x);
          auto y = device_zeros<float>(be, m * s.n), out = device_zeros<float>(be, m * s.n);
          auto q2 = device_zeros<uint8_t>(be, m * s.n);
          auto sc2 = device_zeros<float>(be, m);
          if (fused) {  // the codes and scales written over the input's (per-row case)
            uint8_t* q = quantize ? (per_row ? d_qa.data() : q2.data()) : nullptr;
            float* sc = quantize ? (per_row ? d_as.data() : sc2.data()) : nullptr;
            be.linear_w8a8_add_rms_norm(d_qa.data(), d_as.data(), g, m, w, y.data(), d_x.data(),
                                        d_nw.data(), out.data(), 1e-5f, q, sc);
            if (quantize && per_row) {
              codes.push_back(to_host(be, d_qa));
              codes.back().resize(static_cast<size_t>(m * s.n));
              scales.push_back(to_host(be, d_as));
            }
          } else {
            be.linear_w8a8(d_qa.data(), d_as.data(), g, m, w, y.data());
            if (quantize)
              be.rms_norm_quant_fp8(d_x.data(), y.data(), d_nw.data(), out.data(), m, s.n, 1e-5f,
                                    q2.data(), sc2.data());
            else
              be.rms_norm(d_x.data(), y.data(), d_nw.data(), out.data(), m, s.n, 1e-5f);
          }
          if (quantize && !(fused && per_row)) {
            codes.push_back(to_host(be, q2));
            scales.push_back(to_host(be, sc2));
          }
          ys.push_back(to_host(be, y));
          res.push_back(to_host(be, d_x));
          outs.push_back(to_host(be, out));
        }
        check_identical(ys[1], ys[0], "y");
        check_identical(res[1], res[0], "residual");
        check_identical(outs[1], outs[0], "normed");
        if (quantize) {
          REQUIRE(codes.size() == 2);
          check_identical(codes[1], codes[0], "codes");
          check_identical(scales[1], scales[0], "scales");
        }
      }
}
BACKEND_TEST_CASE("linear_w8a8_add_rms_norm equals linear_w8a8 then the norm",
                  linear_add_norm_case)

// q/k/v-like weights side by side in one buffer (fp8_adjacent), with biases.
void multi_adjacent_case(Backend& be) {
  std::mt19937 rng(34);
  const int64_t m = 9, k = 128;
  const int64_t ns[3] = {64, 32, 32};
  const int64_t total = ns[0] + ns[1] + ns[2];
  const std::vector<uint8_t> qa = random_e4m3_codes(rng, m * k);
  const std::vector<uint8_t> qw = random_e4m3_codes(rng, total * k);
  const std::vector<float> ws = uniform(rng, total, 1e-3f, 1e-2f);
  const std::vector<float> as = uniform(rng, m, 1e-3f, 3e-2f);
  const std::vector<float> bias = uniform(rng, total, -1, 1);
  const auto d_qa = to_device(be, qa), d_qw = to_device(be, qw);
  const auto d_ws = to_device(be, ws), d_as = to_device(be, as), d_bias = to_device(be, bias);
  std::vector<WeightRef> refs;
  int64_t row = 0;
  for (const int64_t n : ns) {
    refs.push_back(WeightRef{d_qw.data() + row * k, DType::FP8_E4M3, n, k, d_ws.data() + row,
                             ScaleGranularity::PerRow, d_bias.data() + row});
    row += n;
  }
  REQUIRE(fp8_adjacent(refs.data(), 3));
  std::vector<DeviceArray<float>> multi, single;
  std::vector<float*> ys;
  for (const int64_t n : ns) {
    multi.push_back(device_zeros<float>(be, m * n));
    single.push_back(device_zeros<float>(be, m * n));
    ys.push_back(multi.back().data());
  }
  be.linear_w8a8_multi(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, m, refs.data(),
                       ys.data(), 3);
  row = 0;
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    be.linear_w8a8(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, m, refs[i],
                   single[i].data());
    const std::vector<float> got = to_host(be, multi[i]);
    if (be.exact_k_parts()) {
      check_identical(got, to_host(be, single[i]), "multi vs one call each");
    } else {  // one stacked GEMM: its own summation order, within the FP8 GEMM bound
      const int64_t n = ns[i];
      std::vector<double> ref(m * n), tol(m * n);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t o = 0; o < n; ++o) {
          double acc = 0, mag = 0;
          for (int64_t t = 0; t < k; ++t) {
            const double p = e4m3_values()[qa[r * k + t]] * e4m3_values()[qw[(row + o) * k + t]];
            acc += p;
            mag += std::fabs(p);
          }
          const double sc = double(as[r]) * ws[row + o];
          ref[r * n + o] = acc * sc + bias[row + o];
          tol[r * n + o] = double(k + 4) * kEps * (mag * sc + std::fabs(bias[row + o])) +
                           fp8_tensor_core_rel(be, k) * mag * sc;
        }
      check_close(got, ref, tol, "multi (one stacked GEMM) against float64");
    }
    row += ns[i];
  }
}
BACKEND_TEST_CASE("linear_w8a8_multi over adjacent weights equals one call each",
                  multi_adjacent_case)

// Gate and up side by side (as the CUDA loader stores them), SwiGLU and its codes, the output
// codes and scales written over the input's, against linear_w8a8_multi then silu_mul_quant_fp8.
void linear_silu_quant_case(Backend& be) {
  std::mt19937 rng(35);
  const int64_t m = 5, k = 64, f = 172;
  for (const bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    const std::vector<uint8_t> qa = random_e4m3_codes(rng, m * k);
    const std::vector<uint8_t> qw = random_e4m3_codes(rng, 2 * f * k);
    const std::vector<float> ws = uniform(rng, 2 * f, 1e-3f, 1e-2f);
    const std::vector<float> as = uniform(rng, m, 1e-3f, 3e-2f);
    const std::vector<float> bias = uniform(rng, 2 * f, -1, 1);
    const auto d_qw = to_device(be, qw);
    const auto d_ws = to_device(be, ws), d_bias = to_device(be, bias);
    const float* b = with_bias ? d_bias.data() : nullptr;
    const WeightRef gw{d_qw.data(), DType::FP8_E4M3, f, k, d_ws.data(), ScaleGranularity::PerRow,
                       b};
    const WeightRef uw{d_qw.data() + f * k, DType::FP8_E4M3, f, k, d_ws.data() + f,
                       ScaleGranularity::PerRow, with_bias ? d_bias.data() + f : nullptr};
    const WeightRef pair[2] = {gw, uw};
    REQUIRE(fp8_adjacent(pair, 2));
    std::vector<std::vector<float>> gates, scales;
    std::vector<std::vector<uint8_t>> codes;
    for (int fused = 0; fused < 2; ++fused) {
      std::vector<uint8_t> qa_buf(static_cast<size_t>(m * f), 0);  // act.qa: max(k, f) wide
      std::copy(qa.begin(), qa.end(), qa_buf.begin());
      auto d_qa = to_device(be, qa_buf);
      auto d_as = to_device(be, as);
      auto gate = device_zeros<float>(be, m * f), up = device_zeros<float>(be, m * f);
      if (fused) {
        be.linear_w8a8_silu_quant(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, m, gw, uw,
                                  gate.data(), up.data(), d_qa.data(), d_as.data());
      } else {
        float* const ys[2] = {gate.data(), up.data()};
        be.linear_w8a8_multi(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, m, pair, ys, 2);
        be.silu_mul_quant_fp8(gate.data(), up.data(), gate.data(), m, f, d_qa.data(),
                              d_as.data());
      }
      gates.push_back(to_host(be, gate));
      codes.push_back(to_host(be, d_qa));
      scales.push_back(to_host(be, d_as));
    }
    check_identical(gates[1], gates[0], "silu(gate) * up");
    check_identical(codes[1], codes[0], "codes");
    check_identical(scales[1], scales[0], "scales");
  }
}
BACKEND_TEST_CASE("linear_w8a8_silu_quant equals the two linears then silu_mul_quant_fp8",
                  linear_silu_quant_case)

}  // namespace
