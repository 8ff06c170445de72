// Row-parallel linears (models/linear.h linear_forward_row_parallel) on the CPU rank group:
// the FP8 dynamic input of each rank's column block is quantized with the whole row's scale
// (row_amax -> all_reduce_max -> quantize_fp8_dynamic(amax)), so every code and scale equals the
// unsharded one bit for bit; with the k-sum split in the same G parts at every TP size (G = 12
// here: lcm of 2, 3, 4) and the gathered parts added in part order, the output equals TP 1's bit
// for bit. Shapes with tails (k = 168: parts of 14 codes, shards of 84, 56, 42).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/fp8.h"
#include "kernels/forwarding_backend.h"
#include "kernels/minifloat_reference.h"
#include "kernels/rank_group.h"
#include "models/linear.h"
#include "models/tensor_parallel.h"

namespace octet {
namespace {

std::vector<float> random_vec(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The CPU backend as a backend that sums all of k at once would present itself (CUDA's
// exact_k_parts() is false): the model then takes vLLM's row-parallel path.
struct NoExactParts final : ForwardingBackend {
  NoExactParts() : ForwardingBackend(make_backend("cpu")) {}
  bool exact_k_parts() const override { return false; }
};

// BF16 rounding and widening written from the format (minifloat_reference.h), not octet's.
float bf16_round(float x) {
  const uint32_t code =
      octet_test::round_to_code(octet_test::kBf16, x, octet_test::Overflow::kToInfinity, 0x7FFF);
  return static_cast<float>(octet_test::code_value(octet_test::kBf16, code));
}

// The BF16 all-reduce's result (kernels/communicator.h) of the ranks' outputs ys[r]: each
// rounded to BF16 (Backend::f32_to_bf16), the widened values added in rank order in FP32,
// the sum rounded once, widened back (bf16_to_f32).
std::vector<float> bf16_reduced(const std::vector<std::vector<float>>& ys) {
  std::vector<float> out(ys[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    float acc = bf16_round(ys[0][i]);
    for (size_t r = 1; r < ys.size(); ++r) acc += bf16_round(ys[r][i]);
    out[i] = bf16_round(acc);
  }
  return out;
}

// The same outputs summed in FP32 in rank order (the all_reduce_sum of the CPU's path).
std::vector<float> f32_reduced(const std::vector<std::vector<float>>& ys) {
  std::vector<float> out = ys[0];
  for (size_t r = 1; r < ys.size(); ++r)
    for (size_t i = 0; i < out.size(); ++i) out[i] += ys[r][i];
  return out;
}

}  // namespace

TEST_CASE("tp linear: row-parallel FP8 codes, scales and outputs equal the unsharded ones",
          "[tp]") {
  const int64_t m = 5, k = 168, n = 24, groups = 12;
  std::vector<float> x = random_vec(m * k, 1, 1.0f);
  x[3 * k + 166] = 9.0f;  // row 3's max sits in the last rank's block only
  HostLinearWeight hw;
  hw.name = "down_proj";
  hw.out_features = n;
  hw.in_features = k;
  hw.w_f32 = random_vec(n * k, 2, 0.05f);
  hw.bias = random_vec(n, 3, 0.1f);
  quantize_linear_fp8(hw, ScaleGranularity::PerRow);
  hw.k_groups = groups;
  const bool static_input = GENERATE(false, true);  // dynamic per token, or a static input_scale
  INFO("static input " << static_input);
  if (static_input) {
    hw.static_input = true;
    hw.input_scale = 9.0f / 448.0f;
  }

  // TP 1: the whole row.
  std::unique_ptr<Backend> be1 = make_backend("cpu");
  std::vector<uint8_t> q1(m * k);
  std::vector<float> s1(m), y1(m * n);
  {
    const LinearWeight w = upload_linear(*be1, hw);
    Buffer bx = be1->allocate(m * k * 4), bq = be1->allocate(m * k), bs = be1->allocate(m * 4),
           by = be1->allocate(m * n * 4);
    be1->upload(bx, 0, x.data(), m * k * 4);
    linear_forward(*be1, w, bx.as<float>(), m, by.as<float>(), bq.as<uint8_t>(), bs.as<float>());
    be1->download(bq, 0, q1.data(), m * k);
    be1->download(bs, 0, s1.data(), m * 4);
    be1->download(by, 0, y1.data(), m * n * 4);
  }
  for (int world : {2, 3, 4}) {
    INFO("world " << world);
    const int64_t kr = k / world;
    std::vector<uint8_t> q(m * k);
    std::vector<std::vector<float>> s(world, std::vector<float>(m)), y(world);
    auto group = make_rank_group("cpu", world);
    group->run([&](int r, Communicator& comm) {
      std::unique_ptr<Backend> be = make_backend("cpu");
      HostLinearView<uint8_t> v{hw.w_fp8.data(), n, k, hw.w_scale.data(), n, hw.bias.data()};
      // FP8 row-parallel: the bias on every rank (linear_w8a8_combine adds it once).
      const HostLinearShard<uint8_t> sh = shard_row_parallel(v, r * kr, (r + 1) * kr, true);
      HostLinearWeight w = hw;
      w.w_fp8 = sh.weight;
      w.in_features = kr;
      w.w_scale = sh.scale;
      w.bias = sh.bias;
      w.k_groups = groups / world;
      const LinearWeight lw = upload_linear(*be, w);
      Buffer bx = be->allocate(m * kr * 4), bq = be->allocate(m * kr), bs = be->allocate(m * 4),
             ba = be->allocate(m * 4), by = be->allocate(m * n * 4),
             bp = be->allocate(w.k_groups * m * n * 4), bg = be->allocate(groups * m * n * 4);
      std::vector<float> xr(m * kr);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < kr; ++j) xr[i * kr + j] = x[i * k + r * kr + j];
      be->upload(bx, 0, xr.data(), m * kr * 4);
      linear_forward_row_parallel(*be, comm, lw, bx.as<float>(), m, by.as<float>(),
                                  bq.as<uint8_t>(), bs.as<float>(),
                                  {ba.as<float>(), bp.as<float>(), bg.as<float>()});
      std::vector<uint8_t> qr(m * kr);
      be->download(bq, 0, qr.data(), m * kr);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < kr; ++j) q[i * k + r * kr + j] = qr[i * kr + j];
      be->download(bs, 0, s[r].data(), m * 4);
      y[r].resize(m * n);
      be->download(by, 0, y[r].data(), m * n * 4);
    });
    CHECK(q == q1);  // every code
    for (int r = 0; r < world; ++r) {
      if (!static_input) CHECK(s[r] == s1);  // every dynamic scale, bit for bit
      CHECK(y[r] == y1);  // every output, bit for bit, on every rank
    }
  }
  // The parts matter: the same sum without them (k_groups 1 at TP 1, each rank one part) is a
  // different order, so outputs are not all equal; this guards the test against a vacuous pass.
  std::unique_ptr<Backend> be = make_backend("cpu");
  HostLinearWeight one = hw;
  one.k_groups = 1;
  const LinearWeight w1 = upload_linear(*be, one), w12 = upload_linear(*be, hw);
  Buffer bq = be->allocate(m * k), by = be->allocate(m * n * 4), bs = be->allocate(m * 4);
  be->upload(bq, 0, q1.data(), m * k);
  be->upload(bs, 0, s1.data(), m * 4);
  const float* sa = static_input ? w1.input_scale_buffer.as<const float>() : bs.as<float>();
  const ScaleGranularity ag =
      static_input ? ScaleGranularity::PerTensor : ScaleGranularity::PerRow;
  std::vector<float> y_one(m * n), y_parts(m * n);
  be->linear_w8a8(bq.as<uint8_t>(), sa, ag, m, w1.ref(), by.as<float>());
  be->download(by, 0, y_one.data(), m * n * 4);
  be->linear_w8a8(bq.as<uint8_t>(), sa, ag, m, w12.ref(), by.as<float>());
  be->download(by, 0, y_parts.data(), m * n * 4);
  CHECK(y_parts == y1);
  // (The static codes here are large, |x / s| ~ 50, so their FP32 sums happen to be exact in any
  // order; the dynamic ones reach small codes whose sums round.)
  if (!static_input) CHECK(y_one != y_parts);
}

// A backend without exact k parts (CUDA): each rank quantizes its own input columns (its own
// per-token scale), runs one linear_w8a8 with the bias on rank 0 only, and the outputs are
// summed in BF16 (f32_to_bf16, all_reduce_sum_bf16, bf16_to_f32): every rank's y equals those
// products computed alone, each rounded to BF16, added in rank order in FP32 and rounded once,
// bit for bit (the thread communicator's definition), and the float64 product of the
// dequantized weight within the activations' FP8 rounding and the BF16 roundings (a bias added
// on every rank would miss it by 50 x (world - 1)).
TEST_CASE("tp linear: without exact k parts, row-parallel FP8 is vLLM's local quantization "
          "and a BF16 all-reduce, the bias once",
          "[tp]") {
  const int64_t m = 5, k = 168, n = 24;
  const std::vector<float> x = random_vec(m * k, 11, 1.0f);
  HostLinearWeight hw;
  hw.name = "o_proj";
  hw.out_features = n;
  hw.in_features = k;
  hw.w_f32 = random_vec(n * k, 12, 0.05f);
  hw.bias = std::vector<float>(n, 50.0f);
  quantize_linear_fp8(hw, ScaleGranularity::PerRow);
  hw.k_groups = 12;
  for (int world : {2, 3, 4}) {
    INFO("world " << world);
    const int64_t kr = k / world;
    auto shard = [&](int r) {
      HostLinearView<uint8_t> v{hw.w_fp8.data(), n, k, hw.w_scale.data(), n, hw.bias.data()};
      const HostLinearShard<uint8_t> sh = shard_row_parallel(v, r * kr, (r + 1) * kr, r == 0);
      HostLinearWeight w = hw;
      w.w_fp8 = sh.weight;
      w.in_features = kr;
      w.w_scale = sh.scale;
      w.bias = hw.bias;  // on every rank, as the loader keeps FP8 row-parallel biases
      w.k_groups = hw.k_groups / world;
      return w;
    };
    auto columns = [&](int r) {
      std::vector<float> xr(m * kr);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < kr; ++j) xr[i * kr + j] = x[i * k + r * kr + j];
      return xr;
    };
    // Expected: each rank's product alone on the plain CPU backend (bias on rank 0 only), summed
    // in BF16 as above.
    std::vector<std::vector<float>> alone(world);
    for (int r = 0; r < world; ++r) {
      std::unique_ptr<Backend> be = make_backend("cpu");
      HostLinearWeight w = shard(r);
      if (r != 0) w.bias.clear();
      const LinearWeight lw = upload_linear(*be, w);
      const std::vector<float> xr = columns(r);
      Buffer bx = be->allocate(m * kr * 4), bq = be->allocate(m * kr), bs = be->allocate(m * 4),
             by = be->allocate(m * n * 4);
      be->upload(bx, 0, xr.data(), m * kr * 4);
      linear_forward(*be, lw, bx.as<float>(), m, by.as<float>(), bq.as<uint8_t>(),
                     bs.as<float>());
      alone[r].resize(m * n);
      be->download(by, 0, alone[r].data(), m * n * 4);
    }
    const std::vector<float> want = bf16_reduced(alone), fp32_sum = f32_reduced(alone);
    int64_t moved = 0;  // outputs the BF16 sum moves off the FP32 one (the test is not vacuous)
    for (int64_t i = 0; i < m * n; ++i) moved += want[i] != fp32_sum[i];
    CHECK(moved > m * n / 2);
    std::vector<std::vector<float>> y(world);
    auto group = make_rank_group("cpu", world);
    group->run([&](int r, Communicator& comm) {
      NoExactParts be;
      const LinearWeight lw = upload_linear(be, shard(r));
      const std::vector<float> xr = columns(r);
      Buffer bx = be.allocate(m * kr * 4), bq = be.allocate(m * kr), bs = be.allocate(m * 4),
             by = be.allocate(m * n * 4), bh = be.allocate(m * n * 2);
      be.upload(bx, 0, xr.data(), m * kr * 4);
      // Only the BF16 scratch: none of the exact path's.
      linear_forward_row_parallel(be, comm, lw, bx.as<float>(), m, by.as<float>(),
                                  bq.as<uint8_t>(), bs.as<float>(),
                                  {nullptr, nullptr, nullptr, bh.as<uint16_t>()});
      y[r].resize(m * n);
      be.download(by, 0, y[r].data(), m * n * 4);
    });
    for (int r = 0; r < world; ++r) CHECK(y[r] == want);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t o = 0; o < n; ++o) {
        double ref = hw.bias[o], mag = 0;
        for (int64_t t = 0; t < k; ++t) {
          const double p = double(x[i * k + t]) * fp8_e4m3_to_float(hw.w_fp8[o * k + t]) *
                           hw.w_scale[o];
          ref += p;
          mag += std::fabs(p);
        }
        // E4M3 codes carry 3 mantissa bits: a relative rounding of at most 2^-4 each, and
        // 2^-9 of the rank's row max below the normal range. BF16 keeps 8 significant bits:
        // each rank's output and the sum round by at most 2^-8 of their size.
        double bf16_terms = std::fabs(y[0][i * n + o]);
        for (int r = 0; r < world; ++r) bf16_terms += std::fabs(alone[r][i * n + o]);
        CHECK(std::fabs(y[0][i * n + o] - ref) <= 0.0625 * mag + 0.01 + 0x1p-8 * bf16_terms);
      }
  }
}

}  // namespace octet

namespace octet {

// F32 weights (--quantization none): the CPU (exact k parts) keeps the FP32 all-reduce in rank
// order, so y equals ((y_0 + y_1) + ...) of the ranks' products computed alone, bit for bit;
// without exact k parts (CUDA) the outputs go through the BF16 all-reduce as the FP8 ones do.
// Each rank's product alone (bias on rank 0 only, as shard_row_parallel keeps it) is the
// expectation's input on both paths.
TEST_CASE("tp linear: F32 row-parallel all-reduces in FP32 on the CPU and in BF16 without "
          "exact k parts",
          "[tp]") {
  const int64_t m = 3, k = 96, n = 40;
  const std::vector<float> x = random_vec(m * k, 21, 1.0f);
  const std::vector<float> wf = random_vec(n * k, 22, 0.05f), bias = random_vec(n, 23, 0.5f);
  for (int world : {2, 3, 4}) {
    INFO("world " << world);
    const int64_t kr = k / world;
    auto shard = [&](int r) {
      HostLinearView<float> v{wf.data(), n, k, nullptr, 0, bias.data()};
      const HostLinearShard<float> sh = shard_row_parallel(v, r * kr, (r + 1) * kr, r == 0);
      HostLinearWeight w;
      w.name = "down_proj";
      w.out_features = n;
      w.in_features = kr;
      w.w_f32 = sh.weight;
      w.bias = sh.bias;
      return w;
    };
    auto columns = [&](int r) {
      std::vector<float> xr(m * kr);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < kr; ++j) xr[i * kr + j] = x[i * k + r * kr + j];
      return xr;
    };
    // One rank's y on `be`, alone (comm null: linear_forward) or row-parallel over comm.
    auto run = [&](Backend& be, Communicator* comm, int r) {
      const LinearWeight lw = upload_linear(be, shard(r));
      const std::vector<float> xr = columns(r);
      Buffer bx = be.allocate(m * kr * 4), by = be.allocate(m * n * 4),
             bh = be.allocate(m * n * 2);
      be.upload(bx, 0, xr.data(), m * kr * 4);
      if (comm == nullptr)
        linear_forward(be, lw, bx.as<float>(), m, by.as<float>(), nullptr, nullptr);
      else
        linear_forward_row_parallel(be, *comm, lw, bx.as<float>(), m, by.as<float>(), nullptr,
                                    nullptr, {nullptr, nullptr, nullptr, bh.as<uint16_t>()});
      std::vector<float> y(m * n);
      be.download(by, 0, y.data(), m * n * 4);
      return y;
    };
    std::vector<std::vector<float>> alone(world);
    for (int r = 0; r < world; ++r) alone[r] = run(*make_backend("cpu"), nullptr, r);
    const std::vector<float> fp32_sum = f32_reduced(alone), bf16_sum = bf16_reduced(alone);
    REQUIRE(fp32_sum != bf16_sum);  // the two paths are told apart
    std::vector<std::vector<float>> exact(world), inexact(world);
    auto group = make_rank_group("cpu", world);
    group->run([&](int r, Communicator& comm) {
      exact[r] = run(*make_backend("cpu"), &comm, r);
      NoExactParts be;
      inexact[r] = run(be, &comm, r);
    });
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r);
      CHECK(exact[r] == fp32_sum);
      CHECK(inexact[r] == bf16_sum);
    }
  }
}

}  // namespace octet
