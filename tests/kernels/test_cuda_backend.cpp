// CudaBackend specifics beyond the shared backend cases (test_backend_ops.cpp,
// test_backend_attention.cpp): the cuBLASLt GEMM paths on shapes cuBLASLt takes (k a multiple
// of 16), the k-group part sums and their combine (bit-identical to linear_w8a8), that cuBLASLt
// really takes the eligible shapes (real model sizes among them), batch invariance of every
// GEMM path (a row's bits at m = 1, 2, 7, 16, 64 and past LtGemm's max_rows equal its bits at
// m = 300), and the device strings. Cases needing a GPU are reported skipped without one
// (backend_test_support.h); make_backend's device parsing runs everywhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/mismatch_log.h"

using namespace octet;
using namespace octet_test;

TEST_CASE("make_backend: cuda device names and auto", "[cuda_backend]") {
  ++backend_case_counts().ran;  // a real case: the process never reports skipped for it
  CHECK_THROWS_AS(make_backend("cuda:"), std::invalid_argument);
  CHECK_THROWS_AS(make_backend("cuda:x"), std::invalid_argument);
  CHECK_THROWS_AS(make_backend("cuda:-1"), std::invalid_argument);
  CHECK_THROWS_AS(make_backend("cuda:9999"), std::invalid_argument);
  CHECK_THROWS_AS(make_backend("gpu"), std::invalid_argument);
  bool have_cuda = true;
  try {
    (void)make_backend("cuda");
  } catch (const std::invalid_argument&) {
    have_cuda = false;
  }
  const std::string chosen = make_backend("auto")->name();
  INFO("auto chose " << chosen);
  if (have_cuda)
    CHECK(chosen.rfind("cuda:0 (", 0) == 0);  // the capability >= 8.0 rule holds for cuda:0 here
  else
    CHECK(chosen == "cpu");
  // The CPU's describe() is its name and the W8A8 kernel chosen for this CPU.
  CHECK(make_backend("cpu")->describe() ==
        std::string("cpu, W8A8 kernel ") + w8a8_kernel_name());
}

namespace {

void device_strings_case(Backend& be) {
  const std::string name = be.name(), line = be.describe();
  INFO(name << " | " << line);
  CHECK(name.rfind("cuda:", 0) == 0);
  CHECK(name.find(", sm_") != std::string::npos);
  CHECK(name.find(" GiB)") != std::string::npos);
  CHECK(line.rfind(name, 0) == 0);
  CHECK(line.find("GEMM: ") != std::string::npos);
  CHECK(line.find("paged_decode_split") != std::string::npos);
  CHECK(line.find("paged_prefill_tiled") != std::string::npos);
}

struct W8A8Case {
  int64_t m, n, k, groups;
};

// cuBLASLt-sized W8A8 (k, k / groups multiples of 16, n a multiple of 4) against float64 with
// the bound of test_backend_ops.cpp (with fp8_tensor_core_rel, backend_op_reference.h), the part
// sums against float64 per group (the same bound over k / groups), and linear_w8a8 one GEMM
// over all of k whatever its k groups (exact_k_parts() false: the same bits as k_groups 1).
void w8a8_lt_case(Backend& be) {
  std::mt19937 rng(41);
  for (const W8A8Case c : {W8A8Case{1, 256, 512, 1}, W8A8Case{17, 256, 512, 2},
                           W8A8Case{64, 128, 1024, 4}, W8A8Case{300, 64, 256, 1},
                           W8A8Case{5, 36, 96, 3}}) {
    CAPTURE(c.m, c.n, c.k, c.groups);
    const std::vector<uint8_t> qa = random_e4m3_codes(rng, c.m * c.k);
    const std::vector<uint8_t> qw = random_e4m3_codes(rng, c.n * c.k);
    const std::vector<float> ws = uniform(rng, c.n, 1e-3f, 1e-2f);
    const std::vector<float> as = uniform(rng, c.m, 1e-3f, 3e-2f);
    const std::vector<float> bias = uniform(rng, c.n, -4, 4);
    const auto d_qa = to_device(be, qa);
    const auto d_qw = to_device(be, qw);
    const auto d_ws = to_device(be, ws);
    const auto d_as = to_device(be, as);
    const auto d_bias = to_device(be, bias);
    WeightRef w{d_qw.data(), DType::FP8_E4M3, c.n, c.k, d_ws.data(), ScaleGranularity::PerRow,
                d_bias.data(), c.groups};
    auto d_y = device_zeros<float>(be, c.m * c.n);
    auto d_y2 = device_zeros<float>(be, c.m * c.n);
    auto d_acc = device_zeros<float>(be, c.groups * c.m * c.n);
    be.linear_w8a8(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, c.m, w, d_y.data());
    be.linear_w8a8_partials(d_qa.data(), c.m, w, d_acc.data());
    WeightRef whole = w;
    whole.k_groups = 1;
    be.linear_w8a8(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, c.m, whole, d_y2.data());
    const std::vector<float> y = to_host(be, d_y), acc = to_host(be, d_acc);
    REQUIRE_FALSE(be.exact_k_parts());
    check_identical(to_host(be, d_y2), y, "linear_w8a8 in k groups vs one group");
    const int64_t kg = c.k / c.groups;
    std::vector<double> ref(c.m * c.n), tol(c.m * c.n), pref(acc.size()), ptol(acc.size());
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t o = 0; o < c.n; ++o) {
        double total = 0, mag = 0;
        for (int64_t g = 0; g < c.groups; ++g) {
          double part = 0, pmag = 0;
          for (int64_t t = g * kg; t < (g + 1) * kg; ++t) {
            const double p = e4m3_values()[qa[i * c.k + t]] * e4m3_values()[qw[o * c.k + t]];
            part += p;
            pmag += std::fabs(p);
          }
          pref[(g * c.m + i) * c.n + o] = part;
          ptol[(g * c.m + i) * c.n + o] =
              (double(kg + 2) * kEps + fp8_tensor_core_rel(be, kg)) * pmag;
          total += part;
          mag += pmag;
        }
        const double sc = double(as[i]) * ws[o];
        ref[i * c.n + o] = total * sc + bias[o];
        tol[i * c.n + o] = double(c.k + 4) * kEps * (mag * std::fabs(sc) + std::fabs(bias[o])) +
                           fp8_tensor_core_rel(be, c.k) * mag * std::fabs(sc);
      }
    check_close(y, ref, tol, "linear_w8a8 (cuBLASLt shapes)");
    check_close(acc, pref, ptol, "linear_w8a8_partials");
  }
}

// LtGemm's algorithm count from describe(): "...; <usable>/<keys> cached ...".
std::pair<int, int> lt_algorithms(const Backend& be) {
  const std::string line = be.describe();
  const size_t at = line.find(" cached ");
  int usable = -1, keys = -1;
  if (at != std::string::npos && at > 0) {
    const size_t space = line.rfind(' ', at - 1);
    if (space != std::string::npos &&
        std::sscanf(line.c_str() + space + 1, "%d/%d", &usable, &keys) != 2)
      usable = keys = -1;
  }
  return {usable, keys};
}

// cuBLASLt takes every eligible shape (k and k / groups multiples of 16, n % 4 == 0): each new
// (dtype, n, k, ld) gets a batch-invariant algorithm (no "octet: warning: simt_gemm fallback"
// line), Llama-3.1-8B's FP8 shapes among them, and its m = 1 outputs meet the float64 bound.
// A failure here means those shapes run on simt_gemm (10-100x slower), or run wrong.
void lt_takes_eligible_shapes_case(Backend& be) {
  std::mt19937 rng(43);
  const auto before = lt_algorithms(be);
  INFO("before: " << be.describe());
  REQUIRE(before.first >= 0);
  struct Case {
    DType dtype;
    int64_t n, k, groups;
  };
  const Case cases[] = {{DType::F32, 160, 352, 1},
                        {DType::BF16, 160, 352, 1},          // a BF16 lm_head
                        {DType::FP8_E4M3, 6144, 4096, 1},    // Llama-3.1-8B qkv_proj
                        {DType::FP8_E4M3, 4096, 14336, 1},   // Llama-3.1-8B down_proj
                        {DType::FP8_E4M3, 160, 704, 2}};     // k groups: one GEMM of 704
  for (const Case c : cases) {
    CAPTURE(dtype_name(c.dtype), c.n, c.k, c.groups);
    const std::vector<float> bias = uniform(rng, c.n, -1, 1);
    const auto d_bias = to_device(be, bias);
    auto d_y = device_zeros<float>(be, c.n);
    std::vector<double> ref(c.n), tol(c.n);
    if (c.dtype == DType::F32) {
      const std::vector<float> x = uniform(rng, c.k, -2, 2), w = uniform(rng, c.n * c.k, -1, 1);
      const auto d_x = to_device(be, x);
      const auto d_w = to_device(be, w);
      be.linear(d_x.data(), 1,
                WeightRef{d_w.data(), DType::F32, c.n, c.k, nullptr, ScaleGranularity::PerRow,
                          d_bias.data()},
                d_y.data());
      for (int64_t o = 0; o < c.n; ++o) {
        double acc = 0, mag = 0;
        for (int64_t t = 0; t < c.k; ++t) {
          const double p = double(x[t]) * w[o * c.k + t];
          acc += p;
          mag += std::fabs(p);
        }
        ref[o] = acc + bias[o];
        tol[o] = double(c.k + 2) * kEps * (mag + std::fabs(bias[o]));
      }
    } else if (c.dtype == DType::BF16) {
      // cuBLASLt BF16 x BF16: the activations rounded to BF16 first (2^-9 relative each).
      const std::vector<float> x = uniform(rng, c.k, -2, 2), wf = uniform(rng, c.n * c.k, -1, 1);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = ref_bf16(wf[i]);
      const auto d_x = to_device(be, x);
      const auto d_w = to_device(be, wb);
      be.linear(d_x.data(), 1,
                WeightRef{d_w.data(), DType::BF16, c.n, c.k, nullptr, ScaleGranularity::PerRow,
                          d_bias.data()},
                d_y.data());
      for (int64_t o = 0; o < c.n; ++o) {
        double acc = 0, mag = 0;
        for (int64_t t = 0; t < c.k; ++t) {
          const double p =
              double(x[t]) * octet_test::code_value(octet_test::kBf16, wb[o * c.k + t]);
          acc += p;
          mag += std::fabs(p);
        }
        ref[o] = acc + bias[o];
        tol[o] = double(c.k + 2) * kEps * (mag + std::fabs(bias[o])) + std::ldexp(mag, -8);
      }
    } else {
      const std::vector<uint8_t> qa = random_e4m3_codes(rng, c.k);
      const std::vector<uint8_t> qw = random_e4m3_codes(rng, c.n * c.k);
      const std::vector<float> ws = uniform(rng, c.n, 1e-3f, 1e-2f), as = {0.02f};
      const auto d_qa = to_device(be, qa);
      const auto d_qw = to_device(be, qw);
      const auto d_ws = to_device(be, ws);
      const auto d_as = to_device(be, as);
      be.linear_w8a8(d_qa.data(), d_as.data(), ScaleGranularity::PerTensor, 1,
                     WeightRef{d_qw.data(), DType::FP8_E4M3, c.n, c.k, d_ws.data(),
                               ScaleGranularity::PerRow, d_bias.data(), c.groups},
                     d_y.data());
      const std::vector<double>& v = e4m3_values();
      for (int64_t o = 0; o < c.n; ++o) {
        double acc = 0, mag = 0;
        for (int64_t t = 0; t < c.k; ++t) {
          const double p = v[qa[t]] * v[qw[o * c.k + t]];
          acc += p;
          mag += std::fabs(p);
        }
        const double sc = double(as[0]) * ws[o];
        ref[o] = acc * sc + bias[o];
        tol[o] = double(c.k + 4) * kEps * (mag * sc + std::fabs(bias[o])) +
                 fp8_tensor_core_rel(be, c.k) * mag * sc;  // one GEMM over all of k
      }
    }
    check_close(to_host(be, d_y), ref, tol, "m = 1 on cuBLASLt");
  }
  const auto after = lt_algorithms(be);
  INFO("after: " << be.describe());
  const int new_keys = static_cast<int>(std::size(cases));
  CHECK(after.second - before.second == new_keys);  // each case a new (dtype, n, k, ld)
  CHECK(after.first - before.first == new_keys);    // ... each with a cuBLASLt algorithm
}

// One GEMM path of the backend: runs m rows of the activations (F32 x, or E4M3 codes q with
// per-row scales sc) into y ([m, n], or [groups, m, n] for the partials).
struct GemmPath {
  const char* name;
  bool partials;
  std::function<void(const float* x, const uint8_t* q, const float* sc, int64_t m, float* y)> run;
};

// Rows [o, o + m) of a [groups, rows, n] array, as [groups, m, n].
std::vector<float> row_window(const std::vector<float>& a, int64_t groups, int64_t rows,
                              int64_t n, int64_t o, int64_t m) {
  std::vector<float> w;
  for (int64_t g = 0; g < groups; ++g)
    w.insert(w.end(), a.begin() + (g * rows + o) * n, a.begin() + (g * rows + o + m) * n);
  return w;
}

// Batch invariance of every GEMM path (F32 linear, BF16-weight linear, W8A8 with per-row and
// per-tensor activation scales, W8A8 in k groups, the k-group partials) on a shape cuBLASLt
// takes and on one it refuses: windows of m = 1, 2, 7, 16, 64 rows (at the start, at the end and
// inside) run alone, in their own buffers, and must give exactly the bits those rows have in the
// m = 300 run; on the eligible shape also an m = 16404 run (past LtGemm's default max_rows,
// 16384: two cuBLASLt calls) against the m = 300 run and against rows around row 16384 run
// alone. Fails when a row's bits depend on m (an algorithm chosen per m, split-K, a stream-K
// decomposition, a chunking error).
void gemm_batch_invariance_case(Backend& be) {
  struct Shape {
    int64_t n, k, groups;
    bool big;  // also the m = 16404 run
  };
  // n = 96, k = 192 in 3 groups of 64: cuBLASLt for F32 and FP8 (BF16 weights: simt_gemm);
  // n = 37, k = 168 in 3 groups of 56: simt_gemm for every path.
  for (const Shape s : {Shape{96, 192, 3, true}, Shape{37, 168, 3, false}}) {
    CAPTURE(s.n, s.k, s.groups);
    std::mt19937 rng(44);
    const int64_t rows = s.big ? 16404 : 300;
    const std::vector<float> x = uniform(rng, rows * s.k, -2, 2);
    const std::vector<float> wf = uniform(rng, s.n * s.k, -1, 1);
    std::vector<uint16_t> w_bf16(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) w_bf16[i] = ref_bf16(wf[i]);
    const std::vector<uint8_t> qa = random_e4m3_codes(rng, rows * s.k);
    const std::vector<uint8_t> qw = random_e4m3_codes(rng, s.n * s.k);
    const std::vector<float> ws = uniform(rng, s.n, 1e-3f, 1e-2f);
    const std::vector<float> as = uniform(rng, rows, 1e-3f, 3e-2f);
    const std::vector<float> bias = uniform(rng, s.n, -1, 1);
    const auto d_wf = to_device(be, wf);
    const auto d_wb = to_device(be, w_bf16);
    const auto d_qw = to_device(be, qw);
    const auto d_ws = to_device(be, ws);
    const auto d_as1 = to_device(be, std::vector<float>{as[0]});  // the per-tensor scale
    const auto d_bias = to_device(be, bias);
    const WeightRef w_f32{d_wf.data(), DType::F32, s.n, s.k, nullptr, ScaleGranularity::PerRow,
                          d_bias.data()};
    const WeightRef w_b16{d_wb.data(), DType::BF16, s.n, s.k, nullptr, ScaleGranularity::PerRow,
                          d_bias.data()};
    const WeightRef w_q{d_qw.data(), DType::FP8_E4M3, s.n, s.k, d_ws.data(),
                        ScaleGranularity::PerRow, d_bias.data()};
    WeightRef w_qg = w_q;
    w_qg.k_groups = s.groups;
    const std::vector<GemmPath> paths = {
        {"linear F32", false,
         [&](const float* xx, const uint8_t*, const float*, int64_t m, float* y) {
           be.linear(xx, m, w_f32, y);
         }},
        {"linear BF16 weights", false,
         [&](const float* xx, const uint8_t*, const float*, int64_t m, float* y) {
           be.linear(xx, m, w_b16, y);
         }},
        {"linear_w8a8 per-row activation scales", false,
         [&](const float*, const uint8_t* q, const float* sc, int64_t m, float* y) {
           be.linear_w8a8(q, sc, ScaleGranularity::PerRow, m, w_q, y);
         }},
        {"linear_w8a8 per-tensor activation scale", false,
         [&](const float*, const uint8_t* q, const float*, int64_t m, float* y) {
           be.linear_w8a8(q, d_as1.data(), ScaleGranularity::PerTensor, m, w_q, y);
         }},
        {"linear_w8a8 k groups", false,
         [&](const float*, const uint8_t* q, const float* sc, int64_t m, float* y) {
           be.linear_w8a8(q, sc, ScaleGranularity::PerRow, m, w_qg, y);
         }},
        {"linear_w8a8_partials", true,
         [&](const float*, const uint8_t* q, const float*, int64_t m, float* y) {
           be.linear_w8a8_partials(q, m, w_qg, y);
         }},
    };
    for (const GemmPath& path : paths) {
      CAPTURE(path.name);
      const int64_t groups = path.partials ? s.groups : 1;
      // Rows [o, o + m) in buffers of their own, run as one call of m rows.
      auto run_rows = [&](int64_t o, int64_t m) {
        const auto d_xs =
            to_device(be, std::vector<float>(x.begin() + o * s.k, x.begin() + (o + m) * s.k));
        const auto d_qs =
            to_device(be, std::vector<uint8_t>(qa.begin() + o * s.k, qa.begin() + (o + m) * s.k));
        const auto d_ss = to_device(be, std::vector<float>(as.begin() + o, as.begin() + o + m));
        auto d_y = device_zeros<float>(be, groups * m * s.n);
        path.run(d_xs.data(), d_qs.data(), d_ss.data(), m, d_y.data());
        return to_host(be, d_y);
      };
      MismatchLog log;
      auto compare = [&](const std::vector<float>& alone, const std::vector<float>& in_batch,
                         int64_t m, int64_t o, int64_t batch) {
        if (alone.size() != in_batch.size()) log.add("sizes %zu, %zu", alone.size(), in_batch.size());
        for (size_t e = 0; e < std::min(alone.size(), in_batch.size()); ++e)
          if (bits_of(alone[e]) != bits_of(in_batch[e]))
            log.add("m=%lld rows from %lld, [%zu]: alone %a, in m=%lld %a",
                    static_cast<long long>(m), static_cast<long long>(o), e, alone[e],
                    static_cast<long long>(batch), in_batch[e]);
      };
      const std::vector<float> all = run_rows(0, 300);
      for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{16}, int64_t{64}})
        for (int64_t o : {int64_t{0}, 300 - m, (37 * m) % (300 - m)})
          compare(run_rows(o, m), row_window(all, groups, 300, s.n, o, m), m, o, 300);
      if (s.big) {
        const std::vector<float> huge = run_rows(0, rows);
        compare(all, row_window(huge, groups, rows, s.n, 0, 300), 300, 0, rows);
        for (int64_t o : {int64_t{16383}, int64_t{16384}, rows - 1})
          compare(run_rows(o, 1), row_window(huge, groups, rows, s.n, o, 1), 1, o, rows);
        compare(run_rows(16380, 8), row_window(huge, groups, rows, s.n, 16380, 8), 8, 16380,
                rows);
      }
      INFO(log.summary());
      CHECK(log.count() == 0);
    }
  }
}

}  // namespace

OCTET_BACKEND_CASE_("cuda", "name and describe name the device, GEMM path and kernels",
                    device_strings_case)
OCTET_BACKEND_CASE_("cuda", "linear_w8a8, partials and combine on cuBLASLt shapes", w8a8_lt_case)
OCTET_BACKEND_CASE_("cuda", "cuBLASLt takes every eligible shape, real model sizes included",
                    lt_takes_eligible_shapes_case)
OCTET_BACKEND_CASE_("cuda", "every GEMM path is batch invariant (m = 1 ... 300, past max_rows)",
                    gemm_batch_invariance_case)
