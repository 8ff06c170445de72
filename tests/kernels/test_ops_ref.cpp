// The plain reference ops against values worked out by hand from their definitions.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops_ref.h"

using namespace octet;

TEST_CASE("rms_norm divides by the root mean square and scales by weight", "[ops_ref]") {
  const std::vector<float> x{1, 2, 3, 4}, w{1, 1, 2, 0.5f};
  std::vector<float> y(4);
  ref::rms_norm(x.data(), w.data(), y.data(), 4, 0.0f);
  const double inv = 1.0 / std::sqrt(30.0 / 4.0);  // mean of 1+4+9+16
  CHECK(y[0] == Approx(1 * inv));
  CHECK(y[1] == Approx(2 * inv));
  CHECK(y[2] == Approx(6 * inv));
  CHECK(y[3] == Approx(2 * inv));
  // eps enters under the root: all-zero input stays finite.
  const std::vector<float> z{0, 0, 0, 0};
  ref::rms_norm(z.data(), w.data(), y.data(), 4, 1e-5f);
  CHECK(y[0] == 0.0f);
}

TEST_CASE("linear computes x W^T + b with W as (out, in)", "[ops_ref]") {
  // x: [2, 3], W: [2 out, 3 in]
  const std::vector<float> x{1, 2, 3, -1, 0, 1}, w{1, 0, 0, 1, 1, 1}, b{10, 20};
  std::vector<float> y(4);
  ref::linear(x.data(), w.data(), b.data(), y.data(), 2, 2, 3);
  CHECK(y == std::vector<float>{11, 26, 9, 20});
  // A large product takes the threaded path and still equals the obvious sum.
  const int64_t m = 7, n = 300, k = 129;
  std::vector<float> X(m * k), W(n * k), Y(m * n);
  for (int64_t i = 0; i < m * k; ++i) X[i] = static_cast<float>((i % 13) - 6) / 8.0f;
  for (int64_t i = 0; i < n * k; ++i) W[i] = static_cast<float>((i % 7) - 3) / 4.0f;
  ref::linear(X.data(), W.data(), nullptr, Y.data(), m, n, k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;  // small integers / powers of two: exact in float and double
      for (int64_t t = 0; t < k; ++t) acc += double(X[i * k + t]) * W[j * k + t];
      REQUIRE(Y[i * n + j] == static_cast<float>(acc));
    }
}

TEST_CASE("rope rotates pairs by pos * inv_freq in both layouts", "[ops_ref]") {
  const float pi = 3.14159265358979f;
  // One head, head_dim 4, two frequencies: angles pos*pi/2 and pos*pi.
  const std::vector<float> inv{pi / 2, pi};
  std::vector<float> adj{1, 0, 0, 1};  // pairs (x0,x1) = (1,0), (x2,x3) = (0,1)
  ref::rope(adj.data(), 1, 4, 4, 1, inv.data(), RopeLayout::AdjacentPairs);
  CHECK(adj[0] == Approx(0).margin(1e-6));
  CHECK(adj[1] == Approx(1));  // (1,0) rotated by 90 degrees
  CHECK(adj[2] == Approx(0).margin(1e-6));
  CHECK(adj[3] == Approx(-1));  // (0,1) rotated by 180 degrees
  std::vector<float> half{1, 0, 0, 1};  // pairs (x0,x2) = (1,0), (x1,x3) = (0,1)
  ref::rope(half.data(), 1, 4, 4, 1, inv.data(), RopeLayout::HalfSplit);
  CHECK(half[0] == Approx(0).margin(1e-6));
  CHECK(half[2] == Approx(1));
  CHECK(half[1] == Approx(0).margin(1e-6));
  CHECK(half[3] == Approx(-1));

  // The two layouts agree once dims are permuted (llama.cpp's GGUF permutation of Q/K rows):
  // adjacent index 2i <-> half-split i, 2i+1 <-> i + d/2. Two heads, partial rotary_dim.
  const int64_t heads = 2, d = 8, rot = 8;
  std::vector<float> inv4{1.0f, 0.3f, 0.1f, 0.01f};
  std::vector<float> a(heads * d), h(heads * d);
  for (int64_t i = 0; i < heads * d; ++i) a[i] = std::sin(0.7f * i + 0.1f);
  for (int64_t hh = 0; hh < heads; ++hh)
    for (int64_t i = 0; i < d / 2; ++i) {
      h[hh * d + i] = a[hh * d + 2 * i];
      h[hh * d + i + d / 2] = a[hh * d + 2 * i + 1];
    }
  ref::rope(a.data(), heads, d, rot, 37, inv4.data(), RopeLayout::AdjacentPairs);
  ref::rope(h.data(), heads, d, rot, 37, inv4.data(), RopeLayout::HalfSplit);
  for (int64_t hh = 0; hh < heads; ++hh)
    for (int64_t i = 0; i < d / 2; ++i) {
      CHECK(h[hh * d + i] == a[hh * d + 2 * i]);
      CHECK(h[hh * d + i + d / 2] == a[hh * d + 2 * i + 1]);
    }
}

TEST_CASE("softmax and silu_mul", "[ops_ref]") {
  std::vector<float> x{0, std::log(3.0f), 1000.0f - 1000.0f};
  ref::softmax(x.data(), 3);
  CHECK(x[0] == Approx(0.2));
  CHECK(x[1] == Approx(0.6));
  CHECK(x[2] == Approx(0.2));
  std::vector<float> big{1000.0f, 1000.0f};  // max-subtracted: no overflow
  ref::softmax(big.data(), 2);
  CHECK(big[0] == Approx(0.5));

  const std::vector<float> g{0, 1, -2}, u{5, 2, 1};
  std::vector<float> o(3);
  ref::silu_mul(g.data(), u.data(), o.data(), 3);
  CHECK(o[0] == 0.0f);
  CHECK(o[1] == Approx(2.0 / (1.0 + std::exp(-1.0))));
  CHECK(o[2] == Approx(-2.0 / (1.0 + std::exp(2.0))));
}

TEST_CASE("attention: softmax-weighted values, GQA head mapping, causal span", "[ops_ref]") {
  // 4 query heads, 2 KV heads (group of 2), head_dim 2, 2 context tokens.
  const int64_t nh = 4, nkv = 2, d = 2, ctx = 2;
  const std::vector<float> q{1, 0, 0, 0, 0, 1, 0, 0};
  // k, v: [ctx, nkv, d]
  const std::vector<float> k{1, 0, 0, 1, /*t1*/ 0, 0, 0, 0};
  const std::vector<float> v{1, 2, 3, 4, /*t1*/ 5, 6, 7, 8};
  std::vector<float> out(nh * d);
  ref::attention(q.data(), k.data(), v.data(), out.data(), nh, nkv, d, ctx, 1.0f);
  // head 0 -> kv 0: scores (1, 0): p = (e/(e+1), 1/(e+1))
  const double e = std::exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
  CHECK(out[0] == Approx(p0 * 1 + p1 * 5));
  CHECK(out[1] == Approx(p0 * 2 + p1 * 6));
  // head 1 -> kv 0: q = 0, uniform
  CHECK(out[2] == Approx(3));
  CHECK(out[3] == Approx(4));
  // head 2 -> kv 1: scores (q.k) = (1, 0)
  CHECK(out[4] == Approx(p0 * 3 + p1 * 7));
  CHECK(out[5] == Approx(p0 * 4 + p1 * 8));
  // One visible token: the output is that token's value.
  ref::attention(q.data(), k.data(), v.data(), out.data(), nh, nkv, d, 1, 1.0f);
  CHECK(out[0] == 1.0f);
  CHECK(out[7] == 4.0f);
}
