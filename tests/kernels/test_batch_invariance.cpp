// Batch invariance of every CPU linear kernel (issue 4): row i of y must be bit-identical
// (memcmp) to what the same kernel path gives for that row alone (m = 1), whatever the batch
// size m, the row's position in the batch and the OpenMP thread count. Each path (scalar, AVX2,
// AVX-512) is checked on its own; the run-time dispatchers too. The m = 1 results are also
// checked against the plain references (ref::), so a kernel that is consistently wrong fails.
// Paths this CPU lacks exit 77 (ctest reports them skipped). The CUDA backend's linear ops are
// checked the same way at real model shapes (the last case; exits 77 without a GPU).
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/w8a8.h"

using namespace octet;

namespace {

const std::vector<int64_t> kBatchSizes{1, 2, 3, 5, 8, 16, 17, 64, 130};
constexpr int64_t kPoolRows = 131;  // distinct activation rows the batches are drawn from

// (n, k): n = 256 and k = 576 are large enough for every kernel to go parallel even at m = 1;
// the others leave tails in every chunking (k % 64, % 16, % 8 != 0; n % 4, % 16 != 0).
struct Shape {
  int64_t n, k;
};
const Shape kShapes[] = {{256, 576}, {37, 100}, {19, 1000}, {6, 13}};

// y: [m, n] = the kernel on the batch made of pool rows rows[0..m) (the kernel gathers them,
// with whatever per-row data goes with them, e.g. an activation scale).
using Kernel = std::function<void(const int64_t* rows, int64_t m, float* y)>;

// x: [m, k] = pool rows rows[0..m) (pool: [kPoolRows, k]).
template <typename T>
std::vector<T> gather(const std::vector<T>& pool, int64_t k, const int64_t* rows, int64_t m) {
  std::vector<T> x(static_cast<size_t>(m * k));
  for (int64_t p = 0; p < m; ++p)
    std::memcpy(x.data() + p * k, pool.data() + rows[p] * k, sizeof(T) * k);
  return x;
}

// Every batch of every size and order: rows (start + p * step) mod kPoolRows for p < m.
struct Batch {
  int64_t start, step;
};
const Batch kBatches[] = {{0, 1}, {7, 1}, {kPoolRows - 1, kPoolRows - 1} /* reversed */};

void skip(const char* why) {
  std::cout << "SKIPPED: " << why << "\n";
  std::exit(77);
}

// Restores the OpenMP thread count on scope exit.
struct ThreadCount {
  int saved = omp_get_max_threads();
  ~ThreadCount() { omp_set_num_threads(saved); }
};

// Checks that kernel(batch) row p == kernel(row alone) bitwise for every batch size, batch
// order and thread count (1, 2). alone: [kPoolRows, n], the m = 1 results made with one thread.
void check_invariant(const std::string& name, const Kernel& kernel, int64_t n,
                     const std::vector<float>& alone) {
  ThreadCount restore;
  int64_t mismatches = 0;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int64_t m : kBatchSizes)
      for (const Batch& b : kBatches) {
        std::vector<int64_t> rows(static_cast<size_t>(m));
        for (int64_t p = 0; p < m; ++p) rows[p] = (b.start + p * b.step) % kPoolRows;
        std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
        kernel(rows.data(), m, y.data());
        for (int64_t p = 0; p < m; ++p)
          if (std::memcmp(y.data() + p * n, alone.data() + rows[p] * n, sizeof(float) * n) != 0) {
            if (mismatches++ < 5)
              UNSCOPED_INFO(name << ": n=" << n << " m=" << m << " threads="
                                 << threads << " batch position " << p << " (pool row "
                                 << rows[p] << ") differs from the row alone");
          }
      }
  }
  CHECK(mismatches == 0);
}

// The m = 1 result of every pool row, one thread.
std::vector<float> rows_alone(const Kernel& kernel, int64_t n) {
  ThreadCount restore;
  omp_set_num_threads(1);
  std::vector<float> alone(static_cast<size_t>(kPoolRows * n));
  for (int64_t r = 0; r < kPoolRows; ++r) kernel(&r, 1, alone.data() + r * n);
  return alone;
}

uint8_t finite_code(std::mt19937& rng) {  // any E4M3 code but NaN (0x7F / 0xFF)
  std::uniform_int_distribution<int> code(0, 255);
  for (;;) {
    const int c = code(rng);
    if ((c & 0x7F) != 0x7F) return static_cast<uint8_t>(c);
  }
}

using W8a8Fn = void (*)(const uint8_t*, const float*, ScaleGranularity, const Fp8WeightView&,
                        const float*, float*, int64_t);

// Every activation / weight scale granularity, with and without bias, every shape.
void check_w8a8_path(const std::string& name, W8a8Fn fn) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> uni(0.5f, 2.0f);
  for (const Shape& s : kShapes) {
    const int64_t n = s.n, k = s.k;
    std::vector<uint8_t> pool(static_cast<size_t>(kPoolRows * k)), qw(static_cast<size_t>(n * k));
    for (auto& c : pool) c = finite_code(rng);
    for (auto& c : qw) c = finite_code(rng);
    std::vector<float> row_scales(static_cast<size_t>(kPoolRows)), sw(static_cast<size_t>(n)),
        bias(static_cast<size_t>(n));
    for (auto& v : row_scales) v = 0.01f * uni(rng);
    for (auto& v : sw) v = 0.01f * uni(rng);
    for (auto& v : bias) v = uni(rng) - 1.25f;
    const float static_scale = 0.0123f;
    for (auto a_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor})
      for (auto w_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor})
        for (bool with_bias : {false, true}) {
          const Fp8WeightView w{qw.data(), sw.data(), w_gran, n, k};
          const float* b = with_bias ? bias.data() : nullptr;
          // Each pool row has its own dynamic scale, which travels with it into any batch.
          auto run = [&](W8a8Fn f, const int64_t* rows, int64_t m, float* y) {
            const std::vector<uint8_t> x = gather(pool, k, rows, m);
            std::vector<float> sa(static_cast<size_t>(m));
            for (int64_t p = 0; p < m; ++p)
              sa[p] = a_gran == ScaleGranularity::PerRow ? row_scales[rows[p]] : static_scale;
            f(x.data(), sa.data(), a_gran, w, b, y, m);
          };
          const Kernel kernel = [&](const int64_t* rows, int64_t m, float* y) {
            run(fn, rows, m, y);
          };
          const std::vector<float> alone = rows_alone(kernel, n);
          // Sanity: the m = 1 results are the reference's up to FP32 summation order.
          std::vector<float> yref(static_cast<size_t>(kPoolRows * n));
          for (int64_t r = 0; r < kPoolRows; ++r) run(&ref::linear_w8a8, &r, 1, yref.data() + r * n);
          int64_t far = 0;
          for (size_t i = 0; i < alone.size(); ++i) {
            const float scale = std::fabs(yref[i]) + 1.0f;  // |acc * s| is O(1) here
            if (!(std::fabs(alone[i] - yref[i]) <= 1e-4f * scale)) ++far;
          }
          INFO(name << " n=" << n << " k=" << k);
          CHECK(far == 0);
          check_invariant(name + (a_gran == ScaleGranularity::PerRow ? " a:row" : " a:tensor") +
                              (w_gran == ScaleGranularity::PerRow ? " w:row" : " w:tensor") +
                              (with_bias ? " bias" : "") + " k=" + std::to_string(k),
                          kernel, n, alone);
        }
  }
}

using F32Fn = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t);

void check_f32_path(const std::string& name, F32Fn fn) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& s : kShapes) {
    const int64_t n = s.n, k = s.k;
    std::vector<float> pool(static_cast<size_t>(kPoolRows * k)), w(static_cast<size_t>(n * k)),
        bias(static_cast<size_t>(n));
    for (auto& v : pool) v = normal(rng);
    for (auto& v : w) v = normal(rng) * 0.05f;
    for (auto& v : bias) v = normal(rng);
    for (bool with_bias : {false, true}) {
      const float* b = with_bias ? bias.data() : nullptr;
      const Kernel kernel = [&](const int64_t* rows, int64_t m, float* y) {
        fn(gather(pool, k, rows, m).data(), w.data(), b, y, m, n, k);
      };
      const std::vector<float> alone = rows_alone(kernel, n);
      std::vector<float> yref(static_cast<size_t>(kPoolRows * n));
      ref::linear(pool.data(), w.data(), b, yref.data(), kPoolRows, n, k);
      int64_t far = 0;
      for (size_t i = 0; i < alone.size(); ++i)
        if (!(std::fabs(alone[i] - yref[i]) <= 1e-4f * (std::fabs(yref[i]) + 1.0f))) ++far;
      INFO(name << " n=" << n << " k=" << k);
      CHECK(far == 0);
      check_invariant(name + (with_bias ? " bias" : "") + " k=" + std::to_string(k), kernel, n,
                      alone);
    }
  }
}

using Bf16Fn = void (*)(const float*, const uint16_t*, float*, int64_t, int64_t, int64_t);

void check_bf16_path(const std::string& name, Bf16Fn fn) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& s : kShapes) {
    const int64_t n = s.n, k = s.k;
    std::vector<float> pool(static_cast<size_t>(kPoolRows * k));
    std::vector<uint16_t> w(static_cast<size_t>(n * k));
    for (auto& v : pool) v = normal(rng);
    for (auto& v : w) {
      const float f = normal(rng) * 0.05f;
      uint32_t u;
      std::memcpy(&u, &f, 4);
      v = static_cast<uint16_t>(u >> 16);  // truncated: any bf16 will do
    }
    const Kernel kernel = [&](const int64_t* rows, int64_t m, float* y) {
      fn(gather(pool, k, rows, m).data(), w.data(), y, m, n, k);
    };
    const std::vector<float> alone = rows_alone(kernel, n);
    std::vector<float> yref(static_cast<size_t>(kPoolRows * n));
    ref::linear_bf16(pool.data(), w.data(), yref.data(), kPoolRows, n, k);
    int64_t far = 0;
    for (size_t i = 0; i < alone.size(); ++i)
      if (!(std::fabs(alone[i] - yref[i]) <= 1e-4f * (std::fabs(yref[i]) + 1.0f))) ++far;
    INFO(name << " n=" << n << " k=" << k);
    CHECK(far == 0);
    check_invariant(name + " k=" + std::to_string(k), kernel, n, alone);
  }
}

}  // namespace

TEST_CASE("linear_w8a8 scalar path is batch invariant", "[batch_invariance][w8a8]") {
  check_w8a8_path("w8a8 scalar", &linear_w8a8_scalar);
}

TEST_CASE("linear_w8a8 avx2 path is batch invariant", "[batch_invariance][w8a8]") {
  if (!fp8_avx2_available()) skip("this CPU lacks AVX2+FMA+F16C");
  check_w8a8_path("w8a8 avx2", &linear_w8a8_avx2);
}

TEST_CASE("linear_w8a8 avx512 path is batch invariant", "[batch_invariance][w8a8][avx512]") {
  if (!w8a8_avx512_available()) skip("this CPU lacks AVX-512 VBMI/BF16");
  check_w8a8_path("w8a8 avx512", &linear_w8a8_avx512);
}

TEST_CASE("linear_w8a8 dispatch is batch invariant", "[batch_invariance][w8a8]") {
  check_w8a8_path("w8a8 dispatch", &linear_w8a8);
}

TEST_CASE("cpu::linear scalar path is batch invariant", "[batch_invariance][f32]") {
  check_f32_path("f32 scalar", &cpu::scalar::linear);
}

TEST_CASE("cpu::linear avx2 path is batch invariant", "[batch_invariance][f32]") {
  if (!fp8_avx2_available()) skip("this CPU lacks AVX2+FMA+F16C");
  check_f32_path("f32 avx2", &cpu::avx2::linear);
}

TEST_CASE("cpu::linear avx2 path: NaN outputs keep their bits in every batch",
          "[batch_invariance][f32]") {
  // x86 keeps the first operand's NaN when two meet in an add; the lane sums fix every add's
  // operand order (VHADDPS's), so a row's NaN payload and sign never depend on which tile of
  // which batch computed it (a compiler left free to swap them gives row-dependent NaNs).
  if (!fp8_avx2_available()) skip("this CPU lacks AVX2+FMA+F16C");
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& s : {Shape{37, 100}, Shape{6, 16}}) {
    const int64_t n = s.n, k = s.k;
    std::vector<float> pool(static_cast<size_t>(kPoolRows * k)), w(static_cast<size_t>(n * k));
    for (auto& v : pool) v = normal(rng);
    for (auto& v : w) v = normal(rng);
    for (int64_t r = 0; r < kPoolRows; ++r)  // NaNs of 4 payloads and both signs, both halves
      for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t bits = (i % 2 ? 0xFFC00000u : 0x7FC00000u) | (1u << i) | uint32_t(r) << 8;
        std::memcpy(&pool[r * k + (r + 3 * i) % 8], &bits, 4);
      }
    const Kernel kernel = [&](const int64_t* rows, int64_t m, float* y) {
      cpu::avx2::linear(gather(pool, k, rows, m).data(), w.data(), nullptr, y, m, n, k);
    };
    const std::vector<float> alone = rows_alone(kernel, n);
    for (float v : alone) REQUIRE(std::isnan(v));
    check_invariant("f32 avx2 NaN k=" + std::to_string(k), kernel, n, alone);
  }
}

TEST_CASE("cpu::linear dispatch is batch invariant", "[batch_invariance][f32]") {
  check_f32_path("f32 dispatch", &cpu::linear);
}

TEST_CASE("linear_bf16 scalar path is batch invariant", "[batch_invariance][bf16]") {
  check_bf16_path("bf16 scalar", &linear_bf16_scalar);
}

TEST_CASE("linear_bf16 avx2 path is batch invariant", "[batch_invariance][bf16]") {
  if (!linear_bf16_avx2_available()) skip("this CPU lacks AVX2+FMA");
  check_bf16_path("bf16 avx2", &linear_bf16_avx2);
}

TEST_CASE("linear_bf16 avx512 path is batch invariant", "[batch_invariance][bf16]") {
  if (!linear_bf16_avx512_available()) skip("this CPU lacks AVX-512F");
  check_bf16_path("bf16 avx512", &linear_bf16_avx512);
}

TEST_CASE("linear_bf16 dispatch is batch invariant", "[batch_invariance][bf16]") {
  check_bf16_path("bf16 dispatch", &linear_bf16);
}

// --- The CUDA backend (Backend::linear, linear_w8a8) at the shapes of real models -----------
// Row i of y must not depend on m: cuBLASLt may pick another algorithm (tile, split-K) per m,
// which changes the summation order, so this is checked at the shapes where its heuristics
// have a choice: Llama-3.2-1B's q/o (2048 x 2048), k/v (512 x 2048), gate/up (8192 x 2048) and
// down (2048 x 8192), Llama-3.1-8B's q/o (4096 x 4096), and one shape cuBLASLt cannot take
// (k % 16 != 0: the SIMT kernel), for m from 1 to 512. Exits 77 without a GPU.

namespace {

struct CudaShape {
  int64_t n, k;
};
const CudaShape kCudaShapes[] = {{2048, 2048}, {512, 2048}, {8192, 2048},
                                 {2048, 8192}, {4096, 4096}, {37, 100}};
const std::vector<int64_t> kCudaBatchSizes{1, 2, 3, 7, 8, 16, 17, 64, 130, 256, 300, 512};
constexpr int64_t kCudaPoolRows = 512;

enum class CudaPath { F32, BF16, W8A8 };

// One weight of `path` on `be`: W ~ N(0, 1/k) (F32, BF16: the float's high 16 bits), or
// random finite E4M3 codes with per-row scales; its buffers live as long as the ref.
struct CudaWeight {
  Buffer data, scale;
  WeightRef ref;
};

CudaWeight make_cuda_weight(Backend& be, CudaPath path, int64_t n, int64_t k, std::mt19937& rng) {
  CudaWeight w;
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  w.ref.n = n, w.ref.k = k;
  if (path == CudaPath::W8A8) {
    std::vector<uint8_t> codes(static_cast<size_t>(n * k));
    for (auto& c : codes) c = finite_code(rng);
    std::vector<float> scale(static_cast<size_t>(n));
    std::uniform_real_distribution<float> uni(0.5f, 2.0f);
    for (auto& s : scale) s = 0.001f * uni(rng);
    w.data = be.allocate(n * k);
    be.upload(w.data, 0, codes.data(), n * k);
    w.scale = be.allocate(n * 4);
    be.upload(w.scale, 0, scale.data(), n * 4);
    w.ref.dtype = DType::FP8_E4M3;
    w.ref.scale = w.scale.as<const float>();
    w.ref.granularity = ScaleGranularity::PerRow;
  } else if (path == CudaPath::BF16) {
    std::vector<uint16_t> bits(static_cast<size_t>(n * k));
    for (auto& b : bits) {
      const float x = normal(rng);
      uint32_t u;
      std::memcpy(&u, &x, 4);
      b = static_cast<uint16_t>(u >> 16);  // any 16 high bits of a finite float: a finite bf16
    }
    w.data = be.allocate(n * k * 2);
    be.upload(w.data, 0, bits.data(), n * k * 2);
    w.ref.dtype = DType::BF16;
  } else {
    std::vector<float> x(static_cast<size_t>(n * k));
    for (auto& v : x) v = normal(rng);
    w.data = be.allocate(n * k * 4);
    be.upload(w.data, 0, x.data(), n * k * 4);
    w.ref.dtype = DType::F32;
  }
  w.ref.data = w.data.data();
  return w;
}

// y: [m, n] on the host = the backend's linear (F32 / BF16 path) or linear_w8a8 (per-row
// activation scales) over pool rows rows[0..m).
void run_cuda_linear(Backend& be, CudaPath path, const CudaWeight& w,
                     const std::vector<float>& pool_f32, const std::vector<uint8_t>& pool_codes,
                     const std::vector<float>& pool_scales, const int64_t* rows, int64_t m,
                     float* y) {
  const int64_t n = w.ref.n, k = w.ref.k;
  Buffer out = be.allocate(m * n * 4);
  if (path == CudaPath::W8A8) {
    const std::vector<uint8_t> qa = gather(pool_codes, k, rows, m);
    const std::vector<float> sa = gather(pool_scales, 1, rows, m);
    Buffer dqa = be.allocate(m * k), dsa = be.allocate(m * 4);
    be.upload(dqa, 0, qa.data(), m * k);
    be.upload(dsa, 0, sa.data(), m * 4);
    be.linear_w8a8(dqa.as<const uint8_t>(), dsa.as<const float>(), ScaleGranularity::PerRow, m,
                   w.ref, out.as<float>());
  } else {
    const std::vector<float> x = gather(pool_f32, k, rows, m);
    Buffer dx = be.allocate(m * k * 4);
    be.upload(dx, 0, x.data(), m * k * 4);
    be.linear(dx.as<const float>(), m, w.ref, out.as<float>());
  }
  be.download(out, 0, y, m * n * 4);
}

}  // namespace

TEST_CASE("cuda backend linear rows are batch invariant at real model shapes",
          "[batch_invariance][cuda]") {
  std::unique_ptr<Backend> be;
  try {
    be = make_backend("cuda");
  } catch (const std::invalid_argument& e) {
    skip(e.what());
  }
  std::mt19937 rng(77);
  for (const CudaShape& s : kCudaShapes) {
    const int64_t n = s.n, k = s.k;
    std::vector<float> pool_f32(static_cast<size_t>(kCudaPoolRows * k)),
        pool_scales(static_cast<size_t>(kCudaPoolRows));
    std::vector<uint8_t> pool_codes(static_cast<size_t>(kCudaPoolRows * k));
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    for (auto& v : pool_f32) v = uni(rng);
    for (auto& c : pool_codes) c = finite_code(rng);
    for (auto& v : pool_scales) v = 0.01f * (1.5f + uni(rng));
    for (const CudaPath path : {CudaPath::F32, CudaPath::BF16, CudaPath::W8A8}) {
      const char* const name =
          path == CudaPath::F32 ? "f32" : path == CudaPath::BF16 ? "bf16" : "w8a8";
      INFO("cuda linear " << name << " n=" << n << " k=" << k);
      const CudaWeight w = make_cuda_weight(*be, path, n, k, rng);
      // Each pool row alone (m = 1).
      std::vector<float> alone(static_cast<size_t>(kCudaPoolRows * n));
      for (int64_t r = 0; r < kCudaPoolRows; ++r)
        run_cuda_linear(*be, path, w, pool_f32, pool_codes, pool_scales, &r, 1,
                        alone.data() + r * n);
      bool nonzero = false;
      for (float v : alone) nonzero = nonzero || v != 0.0f;
      REQUIRE(nonzero);
      int64_t mismatches = 0;
      for (const int64_t m : kCudaBatchSizes) {
        std::vector<int64_t> rows(static_cast<size_t>(m));
        for (int64_t p = 0; p < m; ++p) rows[p] = (m * 13 + p) % kCudaPoolRows;
        std::vector<float> y(static_cast<size_t>(m * n));
        run_cuda_linear(*be, path, w, pool_f32, pool_codes, pool_scales, rows.data(), m,
                        y.data());
        for (int64_t p = 0; p < m; ++p)
          if (std::memcmp(y.data() + p * n, alone.data() + rows[p] * n, sizeof(float) * n) != 0)
            if (mismatches++ < 5)
              UNSCOPED_INFO(name << " n=" << n << " k=" << k << " m=" << m << " batch position "
                                 << p << " differs from the row alone");
      }
      CHECK(mismatches == 0);
    }
  }
}
