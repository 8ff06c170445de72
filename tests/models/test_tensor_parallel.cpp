// Host-side tensor-parallel sharding (models/tensor_parallel.h): vLLM's divisibility rule and its
// error messages, each rank's shard geometry, shards that reassemble to the original for every
// split kind at world sizes 1..4 (with tails), and a column-then-row parallel MLP and a
// vocab-parallel lm_head over the ThreadCommunicator against the unsharded matmuls.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/thread_communicator.h"
#include "models/tensor_parallel.h"

using octet::HostLinearShard;
using octet::HostLinearView;
using octet::ModelConfig;
using octet::TensorParallelShard;

namespace {

ModelConfig config(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim,
                   int64_t intermediate, int64_t vocab) {
  ModelConfig c;
  c.architecture = "llama";
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  return c;
}

// The real models' shapes (shared/models/README.md).
ModelConfig smollm2() { return config(576, 9, 3, 64, 1536, 49152); }
ModelConfig stories260k() { return config(64, 8, 4, 8, 172, 512); }

std::string error_of(const ModelConfig& c, int tp) {
  try {
    octet::validate_tensor_parallel(c, tp);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::vector<float> random_vector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// y[m, n] = x[m, k] . w[n, k]^T (+ bias), FP32, k ascending: the unsharded reference.
std::vector<float> matmul(const std::vector<float>& x, int64_t m, const std::vector<float>& w,
                          int64_t n, int64_t k, const std::vector<float>& bias) {
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += x[i * k + t] * w[j * k + t];
      y[i * n + j] = bias.empty() ? acc : acc + bias[j];
    }
  return y;
}

HostLinearView<float> view(const std::vector<float>& w, int64_t out, int64_t in,
                           const std::vector<float>& scale, const std::vector<float>& bias) {
  return {w.data(), out, in, scale.empty() ? nullptr : scale.data(),
          static_cast<int64_t>(scale.size()), bias.empty() ? nullptr : bias.data()};
}

}  // namespace

TEST_CASE("vLLM's rule: head counts and intermediate_size must split over the ranks", "[tp]") {
  // SmolLM2: 9 heads, 3 KV heads. 1 and 3 split; 2 is a clear error naming both counts.
  CHECK(error_of(smollm2(), 1).empty());
  CHECK(error_of(smollm2(), 3).empty());
  CHECK(error_of(smollm2(), 2) ==
        "tensor_parallel_size 2 does not divide num_attention_heads 9 (num_key_value_heads 3)");
  CHECK(error_of(smollm2(), 4) ==
        "tensor_parallel_size 4 does not divide num_attention_heads 9 (num_key_value_heads 3)");
  // 9 ranks: 1 head each, KV heads replicated 3x, but 1536 % 9 != 0.
  CHECK(error_of(smollm2(), 9) == "tensor_parallel_size 9 does not divide intermediate_size 1536");

  // stories260K: 8 heads, 4 KV heads, FFN 172.
  CHECK(error_of(stories260k(), 2).empty());
  CHECK(error_of(stories260k(), 4).empty());
  CHECK(error_of(stories260k(), 3) ==
        "tensor_parallel_size 3 does not divide num_attention_heads 8 (num_key_value_heads 4)");
  CHECK(error_of(stories260k(), 8) ==
        "tensor_parallel_size 8 does not divide intermediate_size 172");

  // KV heads that do not divide and cannot be replicated.
  CHECK(error_of(config(64, 12, 6, 4, 48, 100), 4) ==
        "tensor_parallel_size 4 does not divide num_key_value_heads 6 (num_attention_heads 12)");
  CHECK(error_of(config(64, 12, 3, 4, 48, 100), 4) ==
        "tensor_parallel_size 4 is larger than num_key_value_heads 3 and not a multiple of it, "
        "so KV heads cannot be replicated (num_attention_heads 12, num_key_value_heads 3)");
  CHECK(error_of(config(64, 12, 3, 4, 48, 100), 6).empty());  // 6 = 2 x 3: replicated
  CHECK(error_of(stories260k(), 0) == "tensor_parallel_size 0 must be at least 1");
  CHECK(error_of(stories260k(), -2) == "tensor_parallel_size -2 must be at least 1");

  REQUIRE_THROWS_AS(octet::make_tensor_parallel_shard(smollm2(), 2, 0), std::invalid_argument);
}

TEST_CASE("tensor_parallel_k_groups: the lcm of every valid TP size", "[tp]") {
  // Worked by hand from vLLM's rule (heads % N, KV heads % N or N a multiple of them,
  // intermediate % N), N in [1, 64]:
  //   SmolLM2 (9 heads, 3 KV, 1536): N in {1, 3} (9: 1536 % 9 = 6)         -> 3
  //   stories260K (8, 4, 172 = 4 * 43): N in {1, 2, 4} (8: 172 % 8 = 4)   -> 4
  //   Llama-3.1-8B (32, 8, 14336 = 2^11 * 7): N in {1, 2, 4, 8, 16, 32}    -> 32
  //   12 heads, 6 KV, 48: N in {1, 2, 3, 6, 12} (4: 6 % 4; 12 > 6, 12 % 6 = 0, 48 % 12 = 0) -> 12
  CHECK(tensor_parallel_k_groups(smollm2()) == 3);
  CHECK(tensor_parallel_k_groups(stories260k()) == 4);
  CHECK(tensor_parallel_k_groups(config(4096, 32, 8, 128, 14336, 128256)) == 32);
  CHECK(tensor_parallel_k_groups(config(64, 12, 6, 4, 48, 100)) == 12);
}

TEST_CASE("each rank's shard geometry", "[tp]") {
  // SmolLM2 at 3: 3 heads, 1 KV head, 512 MLP rows and 16384 vocab rows per rank.
  for (int r = 0; r < 3; ++r) {
    const TensorParallelShard s = octet::make_tensor_parallel_shard(smollm2(), 3, r);
    CHECK(s.rank == r);
    CHECK(s.world_size == 3);
    CHECK(s.num_heads == 3);
    CHECK(s.head_begin == 3 * r);
    CHECK(s.num_kv_heads == 1);
    CHECK(s.kv_head_begin == r);
    CHECK(s.kv_head_replicas == 1);
    CHECK(s.q_dim() == 192);
    CHECK(s.kv_dim() == 64);
    CHECK(s.q_row_begin() == 192 * r);
    CHECK(s.kv_row_begin() == 64 * r);
    CHECK(s.intermediate_size == 512);
    CHECK(s.intermediate_begin == 512 * r);
    CHECK(s.vocab_shard_size == 16384);
    CHECK(s.vocab_begin == 16384 * r);
    CHECK(s.vocab_end == 16384 * (r + 1));
  }
  // stories260K at 4: 2 heads, 1 KV head, 43 MLP rows, 128 vocab rows.
  const TensorParallelShard s3 = octet::make_tensor_parallel_shard(stories260k(), 4, 3);
  CHECK(s3.num_heads == 2);
  CHECK(s3.head_begin == 6);
  CHECK(s3.num_kv_heads == 1);
  CHECK(s3.kv_head_begin == 3);
  CHECK(s3.intermediate_size == 43);
  CHECK(s3.intermediate_begin == 129);
  CHECK(s3.vocab_begin == 384);
  CHECK(s3.vocab_end == 512);

  // Replicated KV heads: 12 heads, 3 KV heads (GQA groups of 4 heads), 6 ranks of 2 heads;
  // KV head g serves heads 4g..4g+3, i.e. ranks 2g and 2g+1.
  for (int r = 0; r < 6; ++r) {
    const TensorParallelShard s =
        octet::make_tensor_parallel_shard(config(64, 12, 3, 4, 48, 100), 6, r);
    CHECK(s.num_heads == 2);
    CHECK(s.head_begin == 2 * r);
    CHECK(s.num_kv_heads == 1);
    CHECK(s.kv_head_begin == r / 2);
    CHECK(s.kv_head_replicas == 2);
    // Every query head of the rank is in the group of its KV head.
    CHECK(s.head_begin / 4 == s.kv_head_begin);
    CHECK((s.head_begin + s.num_heads - 1) / 4 == s.kv_head_begin);
  }

  // Vocab 10 over 4 ranks: ceil 3 -> [0,3) [3,6) [6,9) [9,10); 4 over 3: [0,2) [2,4) [4,4).
  const int64_t want10[4][2] = {{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  for (int r = 0; r < 4; ++r) {
    const auto s = octet::make_tensor_parallel_shard(config(8, 4, 4, 2, 8, 10), 4, r);
    CHECK(s.vocab_shard_size == 3);
    CHECK(s.vocab_begin == want10[r][0]);
    CHECK(s.vocab_end == want10[r][1]);
  }
  const auto last = octet::make_tensor_parallel_shard(config(8, 3, 3, 2, 6, 4), 3, 2);
  CHECK(last.vocab_shard_size == 2);
  CHECK(last.vocab_begin == 4);
  CHECK(last.vocab_end == 4);
}

namespace {

// Shapes with tails: head_dim 3, hidden 7, vocab 10 (not divisible by 3 or 4), FFN 36. MHA
// (24 heads, 12 KV) splits plainly at 1..4; MQA (1 KV head) replicates it at 2..4.
const ModelConfig kMha = config(7, 24, 12, 3, 36, 10);
const ModelConfig kMqa = config(7, 24, 1, 3, 36, 10);

/// Checks that `shards` (rank order) stacked by rows give w's rows, per-row scales and biases.
void require_rows_reassemble(const std::vector<HostLinearShard<float>>& shards,
                             const std::vector<float>& w, const std::vector<float>& scale,
                             const std::vector<float>& bias) {
  std::vector<float> rows, scales, biases;
  for (const auto& s : shards) {
    REQUIRE(s.weight.size() == static_cast<size_t>(s.out_features * s.in_features));
    rows.insert(rows.end(), s.weight.begin(), s.weight.end());
    scales.insert(scales.end(), s.scale.begin(), s.scale.end());
    biases.insert(biases.end(), s.bias.begin(), s.bias.end());
  }
  REQUIRE(rows == w);
  REQUIRE(scales == scale);
  REQUIRE(biases == bias);
}

}  // namespace

TEST_CASE("column-parallel shards (q k/v gate/up) reassemble with their scales and biases",
          "[tp]") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    const int64_t h = kMha.hidden_size;
    const int64_t q_out = kMha.num_attention_heads * kMha.head_dim;  // 72
    const int64_t kv_out = kMha.num_key_value_heads * kMha.head_dim;  // 36
    const int64_t ffn = kMha.intermediate_size;
    const std::vector<float> q = random_vector(q_out * h, 1);
    const std::vector<float> q_s = random_vector(q_out, 2, 0.1f, 1), q_b = random_vector(q_out, 3);
    const std::vector<float> k = random_vector(kv_out * h, 4), k_s = random_vector(kv_out, 5);
    const std::vector<float> g = random_vector(ffn * h, 6), g_b = random_vector(ffn, 7);
    std::vector<HostLinearShard<float>> qs, ks, gs;
    for (int r = 0; r < world; ++r) {
      const TensorParallelShard s = octet::make_tensor_parallel_shard(kMha, world, r);
      qs.push_back(octet::shard_q_proj(view(q, q_out, h, q_s, q_b), s));
      ks.push_back(octet::shard_kv_proj(view(k, kv_out, h, k_s, {}), s));
      gs.push_back(octet::shard_gate_up_proj(view(g, ffn, h, {}, g_b), s));
      CHECK(qs.back().out_features == q_out / world);
      CHECK(ks.back().out_features == kv_out / world);
      CHECK(gs.back().out_features == ffn / world);
      CHECK(qs.back().in_features == h);
    }
    require_rows_reassemble(qs, q, q_s, q_b);
    require_rows_reassemble(ks, k, k_s, {});
    require_rows_reassemble(gs, g, {}, g_b);

    // A per-tensor scale is replicated on every rank.
    const std::vector<float> one_scale = {0.125f};
    for (int r = 0; r < world; ++r) {
      const auto s = octet::make_tensor_parallel_shard(kMha, world, r);
      CHECK(octet::shard_q_proj(view(q, q_out, h, one_scale, {}), s).scale == one_scale);
    }
  }
}

TEST_CASE("replicated KV heads: each rank's k/v rows are its group's head", "[tp]") {
  const int64_t h = kMqa.hidden_size, hd = kMqa.head_dim;
  const std::vector<float> k = random_vector(1 * hd * h, 8), k_s = random_vector(hd, 9);
  for (int world = 2; world <= 4; ++world)
    for (int r = 0; r < world; ++r) {
      const auto s = octet::make_tensor_parallel_shard(kMqa, world, r);
      const auto shard = octet::shard_kv_proj(view(k, hd, h, k_s, {}), s);
      CHECK(shard.weight == k);  // the one KV head, on every rank
      CHECK(shard.scale == k_s);
    }
  // 2 KV heads over 4 ranks: ranks 0, 1 hold head 0; ranks 2, 3 hold head 1.
  const ModelConfig gqa = config(7, 8, 2, 3, 36, 10);
  const std::vector<float> k2 = random_vector(2 * hd * h, 10);
  for (int r = 0; r < 4; ++r) {
    const auto s = octet::make_tensor_parallel_shard(gqa, 4, r);
    const auto shard = octet::shard_kv_proj(view(k2, 2 * hd, h, {}, {}), s);
    const int64_t head = r / 2;
    CHECK(shard.weight == std::vector<float>(k2.begin() + head * hd * h,
                                             k2.begin() + (head + 1) * hd * h));
  }
}

TEST_CASE("row-parallel shards (o_proj down_proj) reassemble by columns with the bias on rank 0",
          "[tp]") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    const int64_t h = kMha.hidden_size;
    const int64_t q_dim = kMha.num_attention_heads * kMha.head_dim;
    const int64_t ffn = kMha.intermediate_size;
    const std::vector<float> o = random_vector(h * q_dim, 11), o_s = random_vector(h, 12),
                             o_b = random_vector(h, 13);
    const std::vector<float> d = random_vector(h * ffn, 14), d_b = random_vector(h, 15);
    std::vector<float> o_back(h * q_dim, NAN), d_back(h * ffn, NAN);
    int64_t o_col = 0, d_col = 0;
    for (int r = 0; r < world; ++r) {
      const auto s = octet::make_tensor_parallel_shard(kMha, world, r);
      const auto os = octet::shard_o_proj(view(o, h, q_dim, o_s, o_b), s);
      const auto ds = octet::shard_down_proj(view(d, h, ffn, {}, d_b), s);
      REQUIRE(os.out_features == h);
      REQUIRE(os.in_features == q_dim / world);
      REQUIRE(ds.in_features == ffn / world);
      CHECK(os.scale == o_s);  // per output row: outputs are not split
      CHECK(os.bias == (r == 0 ? o_b : std::vector<float>{}));
      CHECK(ds.bias == (r == 0 ? d_b : std::vector<float>{}));
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < os.in_features; ++j)
          o_back[i * q_dim + o_col + j] = os.weight[i * os.in_features + j];
        for (int64_t j = 0; j < ds.in_features; ++j)
          d_back[i * ffn + d_col + j] = ds.weight[i * ds.in_features + j];
      }
      o_col += os.in_features;
      d_col += ds.in_features;
    }
    REQUIRE(o_col == q_dim);
    REQUIRE(d_col == ffn);
    REQUIRE(o_back == o);
    REQUIRE(d_back == d);
  }
}

TEST_CASE("vocab-parallel lm_head shards are padded and reassemble for every element type",
          "[tp]") {
  for (const int64_t vocab : {10, 4, 12, 1}) {
    for (int world = 1; world <= 4; ++world) {
      CAPTURE(vocab, world);
      const ModelConfig c = config(7, 12, 12, 3, 36, vocab);
      const int64_t h = c.hidden_size;
      const std::vector<float> w = random_vector(vocab * h, 16), sc = random_vector(vocab, 17);
      std::vector<uint16_t> w16(vocab * h);
      std::vector<uint8_t> w8(vocab * h);
      for (int64_t i = 0; i < vocab * h; ++i) {
        w16[i] = static_cast<uint16_t>(1 + 7 * i);  // arbitrary nonzero bit patterns
        w8[i] = static_cast<uint8_t>(1 + (i % 250));
      }
      const int64_t padded = (vocab + world - 1) / world;
      std::vector<float> rows, scales;
      std::vector<uint16_t> rows16;
      std::vector<uint8_t> rows8;
      for (int r = 0; r < world; ++r) {
        const auto s = octet::make_tensor_parallel_shard(c, world, r);
        const auto sh = octet::shard_lm_head(view(w, vocab, h, sc, {}), s);
        const auto sh16 = octet::shard_lm_head(HostLinearView<uint16_t>{w16.data(), vocab, h}, s);
        const auto sh8 = octet::shard_lm_head(
            HostLinearView<uint8_t>{w8.data(), vocab, h, sc.data(), vocab, nullptr}, s);
        REQUIRE(sh.out_features == padded);
        REQUIRE(sh16.out_features == padded);
        REQUIRE(sh8.out_features == padded);
        const int64_t real = std::max<int64_t>(0, std::min(vocab, (r + 1) * padded) - r * padded);
        // Real rows first, then zero rows with a finite unit scale.
        rows.insert(rows.end(), sh.weight.begin(), sh.weight.begin() + real * h);
        scales.insert(scales.end(), sh.scale.begin(), sh.scale.begin() + real);
        rows16.insert(rows16.end(), sh16.weight.begin(), sh16.weight.begin() + real * h);
        rows8.insert(rows8.end(), sh8.weight.begin(), sh8.weight.begin() + real * h);
        for (int64_t i = real * h; i < padded * h; ++i) {
          REQUIRE(sh.weight[i] == 0.0f);
          REQUIRE(sh16.weight[i] == 0);
          REQUIRE(sh8.weight[i] == 0);
        }
        for (int64_t i = real; i < padded; ++i) REQUIRE(sh.scale[i] == 1.0f);
        REQUIRE(sh16.scale.empty());
      }
      REQUIRE(rows == w);
      REQUIRE(scales == sc);
      REQUIRE(rows16 == w16);
      REQUIRE(rows8 == w8);
    }
  }
}

TEST_CASE("assemble_vocab_parallel_logits drops the padding columns", "[tp]") {
  // vocab 5 over 2 ranks (shard 3): rank 0 holds 0..2, rank 1 holds 3, 4 and one pad column.
  const std::vector<float> gathered = {
      0, 1, 2, /* row 1 */ 10, 11, 12,   // rank 0: [2 rows, 3]
      3, 4, -9, /* row 1 */ 13, 14, -9,  // rank 1: [2 rows, 3], -9 = padding
  };
  std::vector<float> out(10, NAN);
  octet::assemble_vocab_parallel_logits(gathered.data(), 2, 2, 5, 3, out.data());
  CHECK(out == std::vector<float>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
}

// Column-parallel gate then row-parallel down with an all-reduce, over the ThreadCommunicator,
// against the unsharded matmuls. The column-parallel output is bit-identical to the unsharded
// one (each element is the same dot product in the same order). The row-parallel sum is
// reordered: rank r sums its k-slice, then the partials are added in rank order. Both orders
// are recursive summations of the same K products (+ bias), so each is within
// gamma_{K+1} * sum_k |x_k w_k| (+|b|) of the exact value (Higham, "Accuracy and Stability of
// Numerical Algorithms", 3.1: |fl(sum) - sum| <= gamma_{n-1} sum|a_i|, plus u per product and
// per bias add; gamma_n = n u / (1 - n u), u = 2^-24), so they differ by at most twice that.
TEST_CASE("column-then-row parallel MLP and vocab-parallel lm_head equal the unsharded matmuls",
          "[tp]") {
  const ModelConfig c = config(7, 24, 12, 3, 36, 10);
  const int64_t m = 5, h = c.hidden_size, ffn = c.intermediate_size, vocab = c.vocab_size;
  const std::vector<float> x = random_vector(m * h, 20), w1 = random_vector(ffn * h, 21),
                           b1 = random_vector(ffn, 22), w2 = random_vector(h * ffn, 23, -2, 2),
                           b2 = random_vector(h, 24), lm = random_vector(vocab * h, 25);
  auto act = [](float v) { return v / (1.0f + std::exp(-v)); };  // SiLU, elementwise
  std::vector<float> ref_h = matmul(x, m, w1, ffn, h, b1);
  for (float& v : ref_h) v = act(v);
  const std::vector<float> ref_y = matmul(ref_h, m, w2, h, ffn, b2);
  const std::vector<float> ref_logits = matmul(ref_y, m, lm, vocab, h, {});

  const double u = std::ldexp(1.0, -24);
  const double gamma = (ffn + 1) * u / (1 - (ffn + 1) * u);
  std::vector<double> bound(m * h);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < h; ++j) {
      double t = std::fabs(b2[j]);
      for (int64_t k = 0; k < ffn; ++k)
        t += std::fabs(double(ref_h[i * ffn + k]) * w2[j * ffn + k]);
      bound[i * h + j] = 2 * gamma * t;
    }

  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    std::vector<std::vector<float>> hs(world), ys(world), logits(world);
    octet::cpu::run_on_ranks(world, [&](int rank, octet::Communicator& comm) {
      const auto s = octet::make_tensor_parallel_shard(c, world, rank);
      const auto w1s = octet::shard_gate_up_proj(view(w1, ffn, h, {}, b1), s);
      const auto w2s = octet::shard_down_proj(view(w2, h, ffn, {}, b2), s);
      const auto lms = octet::shard_lm_head(view(lm, vocab, h, {}, {}), s);
      std::vector<float> h_r = matmul(x, m, w1s.weight, w1s.out_features, h, w1s.bias);
      for (float& v : h_r) v = act(v);
      std::vector<float> y = matmul(h_r, m, w2s.weight, h, w2s.in_features, w2s.bias);
      comm.all_reduce_sum(y.data(), m * h);
      const std::vector<float> l_r = matmul(y, m, lms.weight, lms.out_features, h, {});
      std::vector<float> gathered(world * l_r.size());
      comm.all_gather(l_r.data(), static_cast<int64_t>(l_r.size()), gathered.data());
      std::vector<float> l(m * vocab);
      octet::assemble_vocab_parallel_logits(gathered.data(), world, m, vocab, s.vocab_shard_size,
                                            l.data());
      hs[rank] = std::move(h_r);
      ys[rank] = std::move(y);
      logits[rank] = std::move(l);
    });
    // Column-parallel: rank r's columns of h equal the unsharded ones bit for bit.
    const int64_t cols = ffn / world;
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < cols; ++j)
          REQUIRE(hs[r][i * cols + j] == ref_h[i * ffn + r * cols + j]);
    // Row-parallel + all-reduce: identical on every rank, within the bound of the unsharded.
    for (int r = 0; r < world; ++r) REQUIRE(ys[r] == ys[0]);
    for (int64_t e = 0; e < m * h; ++e) {
      CAPTURE(e, ys[0][e], ref_y[e], bound[e]);
      REQUIRE(std::fabs(double(ys[0][e]) - ref_y[e]) <= bound[e]);
    }
    if (world == 1) REQUIRE(ys[0] == ref_y);
    // Vocab-parallel: each logit is the same dot product of the (reduced) y as unsharded.
    const std::vector<float> want_logits = matmul(ys[0], m, lm, vocab, h, {});
    for (int r = 0; r < world; ++r) REQUIRE(logits[r] == want_logits);
    if (world == 1) REQUIRE(logits[0] == ref_logits);
  }
}

TEST_CASE("the FP8 row-parallel scale: all_reduce_max of per-rank row maxima is the row's amax",
          "[tp]") {
  // The rule in tensor_parallel.h: the per-token scale of a row-parallel input must not depend
  // on the TP size. Rank r holds columns [r * k / N, (r + 1) * k / N) of each row.
  const int64_t m = 4, k = 36;
  std::vector<float> x = random_vector(m * k, 30, -3, 3);
  x[2 * k + 35] = 7.5f;   // the largest |x| of row 2 in the last rank's columns
  x[1 * k + 0] = -6.0f;   // of row 1, negative, in rank 0's columns
  x[3 * k + 5] = NAN;     // NaN is ignored (fmaxf), as row_amax ignores it
  std::vector<float> want(m, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j)
      if (!std::isnan(x[i * k + j])) want[i] = std::max(want[i], std::fabs(x[i * k + j]));
  CHECK(want[2] == 7.5f);
  CHECK(want[1] == 6.0f);
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    std::vector<std::vector<float>> got(world);
    octet::cpu::run_on_ranks(world, [&](int rank, octet::Communicator& comm) {
      const int64_t cols = k / world, begin = rank * cols;
      std::vector<float> amax(m, 0.0f);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = begin; j < begin + cols; ++j)
          amax[i] = std::fmax(amax[i], std::fabs(x[i * k + j]));
      comm.all_reduce_max(amax.data(), m);
      got[rank] = amax;
    });
    for (int r = 0; r < world; ++r) REQUIRE(got[r] == want);
  }
}
