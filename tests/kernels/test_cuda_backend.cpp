// CudaBackend specifics beyond the shared backend cases (test_backend_ops.cpp,
// test_backend_attention.cpp): the cuBLASLt GEMM paths on shapes cuBLASLt takes (k a multiple
// of 16), the k-group part sums and their combine (bit-identical to linear_w8a8), batch
// invariance on those paths, and the device strings. Cases needing a GPU are reported skipped
// without one (backend_test_support.h); make_backend's device parsing runs everywhere.
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"
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
  CHECK(make_backend("cpu")->describe() == "cpu");  // the default describe() is name()
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
// the bound of test_backend_ops.cpp, the part sums against float64 per group, and combine of the
// part sums bit-identical to linear_w8a8 (the backend.h contract).
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
    be.linear_w8a8_combine(d_acc.data(), c.groups, d_as.data(), ScaleGranularity::PerRow, c.m, w,
                           d_y2.data());
    const std::vector<float> y = to_host(be, d_y), acc = to_host(be, d_acc);
    check_identical(to_host(be, d_y2), y, "combine(partials) vs linear_w8a8");
    const int64_t kg = c.k / c.groups;
    std::vector<double> ref(c.m * c.n), tol(c.m * c.n), pref(acc.size()), ptol(acc.size());
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t o = 0; o < c.n; ++o) {
        double total = 0, mag = 0;
        for (int64_t g = 0; g < c.groups; ++g) {
          double part = 0, pmag = 0;
          for (int64_t t = g * kg; t < (g + 1) * kg; ++t) {
            const double p = double(ref_fp8_value(DType::FP8_E4M3, qa[i * c.k + t])) *
                             ref_fp8_value(DType::FP8_E4M3, qw[o * c.k + t]);
            part += p;
            pmag += std::fabs(p);
          }
          pref[(g * c.m + i) * c.n + o] = part;
          ptol[(g * c.m + i) * c.n + o] = double(kg + 2) * kEps * pmag;
          total += part;
          mag += pmag;
        }
        const double sc = double(as[i]) * ws[o];
        ref[i * c.n + o] = total * sc + bias[o];
        tol[i * c.n + o] = double(c.k + 4) * kEps * (mag * std::fabs(sc) + std::fabs(bias[o]));
      }
    check_close(y, ref, tol, "linear_w8a8 (cuBLASLt shapes)");
    check_close(acc, pref, ptol, "linear_w8a8_partials");
  }
}

// Row i of an m-row batch is bit-identical to the row run alone, on shapes that take cuBLASLt:
// within one m bucket (m = 16; the same algorithm by construction) and across buckets (m = 300),
// for F32 linear and W8A8.
void lt_batch_invariance_case(Backend& be) {
  std::mt19937 rng(42);
  const int64_t n = 128, k = 256;
  for (int64_t m : {int64_t{16}, int64_t{300}}) {
    CAPTURE(m);
    const std::vector<float> x = uniform(rng, m * k, -2, 2);
    const std::vector<float> wf = uniform(rng, n * k, -1, 1);
    const std::vector<uint8_t> qa = random_e4m3_codes(rng, m * k);
    const std::vector<uint8_t> qw = random_e4m3_codes(rng, n * k);
    const std::vector<float> ws = uniform(rng, n, 1e-3f, 1e-2f);
    const std::vector<float> as = uniform(rng, m, 1e-3f, 3e-2f);
    const auto d_x = to_device(be, x);
    const auto d_wf = to_device(be, wf);
    const auto d_qa = to_device(be, qa);
    const auto d_qw = to_device(be, qw);
    const auto d_ws = to_device(be, ws);
    const auto d_as = to_device(be, as);
    auto d_y = device_zeros<float>(be, m * n);
    auto d_y1 = device_zeros<float>(be, n);
    auto d_row = device_zeros<float>(be, k);
    auto d_qrow = device_zeros<uint8_t>(be, k);
    auto d_srow = device_zeros<float>(be, 1);
    const WeightRef wr_f{d_wf.data(), DType::F32, n, k};
    const WeightRef wr_q{d_qw.data(), DType::FP8_E4M3, n, k, d_ws.data()};
    for (bool fp8 : {false, true}) {
      CAPTURE(fp8);
      if (fp8)
        be.linear_w8a8(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, m, wr_q, d_y.data());
      else
        be.linear(d_x.data(), m, wr_f, d_y.data());
      const std::vector<float> all = to_host(be, d_y);
      MismatchLog log;
      for (int64_t i : {int64_t{0}, int64_t{7}, m - 1}) {
        if (fp8) {
          be.upload(d_qrow.buffer, 0, qa.data() + i * k, k);
          be.upload(d_srow.buffer, 0, as.data() + i, 4);
          be.linear_w8a8(d_qrow.data(), d_srow.data(), ScaleGranularity::PerRow, 1, wr_q,
                         d_y1.data());
        } else {
          be.upload(d_row.buffer, 0, x.data() + i * k, k * 4);
          be.linear(d_row.data(), 1, wr_f, d_y1.data());
        }
        const std::vector<float> one = to_host(be, d_y1);
        for (int64_t o = 0; o < n; ++o)
          if (bits_of(one[o]) != bits_of(all[i * n + o]))
            log.add("row %lld out %lld: batch %a, alone %a", static_cast<long long>(i),
                    static_cast<long long>(o), all[i * n + o], one[o]);
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
OCTET_BACKEND_CASE_("cuda", "cuBLASLt linear and linear_w8a8 are batch invariant",
                    lt_batch_invariance_case)
