// CpuBackend and make_backend (kernels/backend.cpp): device names, buffers, and the ops that
// are more than a forward to one kernel (F32 paged caches, fused residual add, gather). The
// per-op comparison of every backend with the ref:: implementations is test_backend_ops.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"

using namespace octet;

TEST_CASE("make_backend: cpu and auto give the CPU, cuda and unknown names are errors naming them",
          "[backend]") {
  CHECK(make_backend("cpu")->name() == "cpu");
#if defined(OCTET_HAVE_CUDA)
  // Built with CUDA: auto and cuda give the CUDA backend where a GPU is present (checked in
  // test_cuda_backend.cpp); here only the refusal without a GPU.
  const bool gpu = make_backend("auto")->name() != "cpu";
#else
  const bool gpu = false;
  CHECK(make_backend("auto")->name() == "cpu");
#endif
  for (const std::string d : {"cuda", "cuda:1"}) {
    if (gpu) break;
    try {
      (void)make_backend(d);
      FAIL("no exception for " << d);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("'" + d + "'") != std::string::npos);
#if defined(OCTET_HAVE_CUDA)
      CHECK(what.find("CUDA GPU") != std::string::npos);
#else
      CHECK(what.find("octet was built without CUDA") != std::string::npos);
#endif
    }
  }
  try {
    (void)make_backend("tpu");
    FAIL("no exception for tpu");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("unknown device 'tpu'") != std::string::npos);
  }
}

TEST_CASE("CpuBackend buffers: zeroed, upload/download at an offset, empty for 0 bytes",
          "[backend]") {
  auto be = make_backend("cpu");
  CHECK(be->allocate(0).empty());
  CHECK(be->allocate(0).data() == nullptr);
  for (int64_t bytes : {int64_t{40}, int64_t{3} << 20}) {  // small and huge-page sized
    Buffer b = be->allocate(bytes);
    REQUIRE(b.bytes() == bytes);
    std::vector<uint8_t> back(static_cast<size_t>(bytes), 0xFF);
    be->download(b, 0, back.data(), bytes);
    CHECK(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0; }));
    const float v[3] = {1.5f, -2.0f, 3.25f};
    be->upload(b, 8, v, sizeof v);
    float w[3] = {};
    be->download(b, 8, w, sizeof w);
    CHECK(std::memcmp(v, w, sizeof v) == 0);
    CHECK(b.as<float>()[2] == 1.5f);  // host memory: bytes 8..11
  }
}

TEST_CASE("CpuBackend rms_norm: residual += delta, then rms_norm_rows, bit for bit", "[backend]") {
  auto be = make_backend("cpu");
  const int64_t m = 3, n = 37;
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(m * n), delta(m * n), w(n);
  for (float& v : x) v = d(rng);
  for (float& v : delta) v = d(rng);
  for (float& v : w) v = d(rng);
  std::vector<float> want_res = x, want(m * n), out(m * n);
  for (int64_t i = 0; i < m * n; ++i) want_res[i] += delta[i];
  cpu::rms_norm_rows(want_res.data(), w.data(), want.data(), m, n, 1e-5f);
  be->rms_norm(x.data(), delta.data(), w.data(), out.data(), m, n, 1e-5f);
  CHECK(x == want_res);
  CHECK(out == want);
}

TEST_CASE("CpuBackend gather_rows picks the named rows in order", "[backend]") {
  auto be = make_backend("cpu");
  const std::vector<float> x{0, 1, 10, 11, 20, 21};
  const std::vector<int64_t> rows{2, 0};
  std::vector<float> out(4);
  be->gather_rows(x.data(), 2, rows.data(), 2, out.data());
  CHECK(out == std::vector<float>{20, 21, 0, 1});
}

// F32 caches (calibration, one-sequence runs) store K/V exactly and attend like the reference.
// Tolerance: as test_paged_attention.cpp (same values, FP32 summation order and the vector exp
// only): 1e-5 x max|V| + 1e-6.
TEST_CASE("CpuBackend F32 paged cache: exact write, attention matches ref::paged_attention",
          "[backend]") {
  auto be = make_backend("cpu");
  const int64_t nkv = 2, hd = 24, bs = 4, blocks = 6, nh = 6, len = 19, nq = 5;
  const int64_t row = nkv * hd;
  Buffer kb = be->allocate(blocks * bs * row * 4), vb = be->allocate(blocks * bs * row * 4);
  KVCacheView view{kb.data(), vb.data(), DType::F32, blocks, bs, nkv, hd, nullptr, nullptr};
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> k(len * row), v(len * row), q(nq * nh * hd);
  for (float& x : k) x = d(rng);
  for (float& x : v) x = d(rng);
  for (float& x : q) x = d(rng);
  const std::vector<int32_t> table{5, 1, 3, 0, 2};  // shuffled blocks
  std::vector<int64_t> slots(len);
  for (int64_t p = 0; p < len; ++p) slots[p] = table[p / bs] * bs + p % bs;
  be->write_kv_cache(view, k.data(), v.data(), slots.data(), len);
  for (int64_t p = 0; p < len; ++p)
    CHECK(std::memcmp(kb.as<float>() + slots[p] * row, k.data() + p * row, row * 4) == 0);
  const std::vector<int64_t> qsl{0, nq}, seq_lens{len};
  const PagedAttentionBatch batch{1, qsl.data(), seq_lens.data(), table.data(),
                                  static_cast<int64_t>(table.size())};
  for (int64_t window : {int64_t{0}, int64_t{7}}) {
    std::vector<float> got(q.size()), want(q.size());
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    be->paged_attention(view, q.data(), batch, nh, window, scale, got.data());
    ref::paged_attention(view, q.data(), batch, nh, window, scale, want.data());
    float vmax = 0;
    for (float x : v) vmax = std::max(vmax, std::fabs(x));
    for (size_t i = 0; i < got.size(); ++i)
      REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f * vmax + 1e-6f);
  }
}
