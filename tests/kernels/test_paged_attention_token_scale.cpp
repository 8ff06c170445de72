// Per-token-head FP8 KV (--kv-cache-dtype fp8_per_token_head, KVCacheView::k_token_scale):
// write_kv_cache computes one scale per (token, KV head) = amax / 448 and stores
// fp8_e4m3(x / scale); paged_attention reads them. Checked against hand-worked codes, against a
// plain attention over K/V dequantized here (independent of ref::), against ref::paged_attention,
// and for batch / thread invariance (bitwise).
// Tolerance: both sides use the same dequantized values in FP32 and differ only in summation
// order, so outputs agree to 1e-5 x max|V| + 1e-6.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/common/fp8.h"
#include "kernels/cpu/paged_attention.h"

using namespace octet;

namespace {

struct TokenCache {
  std::vector<uint8_t> k, v;
  std::vector<float> ks, vs, unit;  // token scales [slots, nkv]; placeholders [nkv]
  KVCacheView view;
  TokenCache(int64_t num_blocks, int64_t block_size, int64_t nkv, int64_t hd)
      : k(static_cast<size_t>(num_blocks * block_size * nkv * hd), 0xAB),
        v(k.size(), 0xCD),
        ks(static_cast<size_t>(num_blocks * block_size * nkv), -1.0f),
        vs(ks.size(), -1.0f),
        unit(static_cast<size_t>(nkv), 1.0f) {
    view.k = k.data();
    view.v = v.data();
    view.dtype = DType::FP8_E4M3;
    view.num_blocks = num_blocks;
    view.block_size = block_size;
    view.num_kv_heads = nkv;
    view.head_dim = hd;
    view.k_scale = unit.data();
    view.v_scale = unit.data();
    view.k_token_scale = ks.data();
    view.v_token_scale = vs.data();
  }
};

// Plain causal attention of one query head over dequantized rows, double accumulation.
void plain_attention(const float* q, const std::vector<std::vector<float>>& k,
                     const std::vector<std::vector<float>>& v, float scale, float* out) {
  const size_t n = k.size(), hd = k[0].size();
  std::vector<double> s(n);
  double mx = -1e300;
  for (size_t t = 0; t < n; ++t) {
    double d = 0;
    for (size_t i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * k[t][i];
    s[t] = d * scale;
    mx = std::max(mx, s[t]);
  }
  double sum = 0;
  std::vector<double> acc(hd, 0.0);
  for (size_t t = 0; t < n; ++t) {
    const double p = std::exp(s[t] - mx);
    sum += p;
    for (size_t i = 0; i < hd; ++i) acc[i] += p * v[t][i];
  }
  for (size_t i = 0; i < hd; ++i) out[i] = static_cast<float>(acc[i] / sum);
}

}  // namespace

TEST_CASE("per-token-head: write_kv_cache stores amax/448 scales and E4M3 codes (by hand)",
          "[paged_attention][token_scale]") {
  TokenCache c(2, 4, 2, 4);  // 2 blocks of 4 slots, 2 KV heads, head_dim 4
  // Token 0: K head 0 amax 896 -> scale 2: 896 -> 448 (0x7E), 1 -> 0.5 (0x30), -2 -> -1 (0xB8),
  // 0 -> 0. K head 1 all zero -> scale 1. V head 0 amax 44.8 -> scale 0.1; V head 1 amax 3.5.
  const std::vector<float> k = {896, 1, -2, 0, 0, 0, 0, 0};
  const std::vector<float> v = {44.8f, 0, 0, 0, 3.5f, -3.5f, 0, 0};
  const int64_t slot = 5;  // block 1, offset 1
  write_kv_cache(c.view, k.data(), v.data(), &slot, 1);
  CHECK(c.ks[slot * 2 + 0] == 2.0f);
  CHECK(c.ks[slot * 2 + 1] == 1.0f);
  CHECK(c.vs[slot * 2 + 0] == 44.8f / 448.0f);
  CHECK(c.vs[slot * 2 + 1] == 3.5f / 448.0f);
  const uint8_t* kr = c.k.data() + slot * 8;
  CHECK(kr[0] == 0x7E);
  CHECK(kr[1] == 0x30);
  CHECK(kr[2] == 0xB8);
  CHECK(kr[3] == 0x00);
  for (int i = 4; i < 8; ++i) CHECK(kr[i] == 0x00);
  const uint8_t* vr = c.v.data() + slot * 8;
  CHECK(vr[4] == 0x7E);  // the amax element is exactly 448
  CHECK(vr[5] == 0xFE);
  // Other slots untouched.
  CHECK(c.ks[0] == -1.0f);
  CHECK(c.k[0] == 0xAB);
  // No element of a written row saturates or clips: the amax maps to 448 itself.
  CHECK(fp8_e4m3_to_float(vr[0]) * c.vs[slot * 2] == Approx(44.8f).epsilon(1e-6));
}

TEST_CASE("per-token-head: paged_attention matches attention over the dequantized cache",
          "[paged_attention][token_scale]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (const auto& [nkv, group, hd, block_size] : std::vector<std::array<int64_t, 4>>{
           {1, 1, 8, 4}, {2, 3, 16, 16}, {4, 2, 64, 8}, {3, 1, 80, 16}}) {
    INFO("nkv " << nkv << " group " << group << " hd " << hd << " block " << block_size);
    const int64_t nh = nkv * group;
    const std::vector<int64_t> lens = {1, 37, 300};  // one partition, several, > 256
    int64_t blocks = 0;
    for (int64_t l : lens) blocks += (l + block_size - 1) / block_size;
    TokenCache c(blocks + 2, block_size, nkv, hd);
    std::vector<int32_t> ids(static_cast<size_t>(blocks + 2));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int64_t maxb = (300 + block_size - 1) / block_size;
    std::vector<int32_t> tables(lens.size() * maxb, 0);
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s)
      for (int64_t b = 0; b < (lens[s] + block_size - 1) / block_size; ++b)
        tables[s * maxb + b] = ids[next++];
    // K/V with per-token magnitudes spread over 2^-6 .. 2^10 (what a single scale cannot hold).
    const int64_t row = nkv * hd;
    std::vector<int64_t> qsl = {0};
    for (size_t s = 0; s < lens.size(); ++s) {
      std::vector<float> k(lens[s] * row), v(k.size());
      std::vector<int64_t> slots(lens[s]);
      for (int64_t p = 0; p < lens[s]; ++p) {
        const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 17) - 6);
        for (int64_t i = 0; i < row; ++i) {
          k[p * row + i] = nd(rng) * mag;
          v[p * row + i] = nd(rng) * mag;
        }
        slots[p] = tables[s * maxb + p / block_size] * block_size + p % block_size;
      }
      write_kv_cache(c.view, k.data(), v.data(), slots.data(), lens[s]);
      qsl.push_back(qsl.back() + std::min<int64_t>(lens[s], 3));  // last <= 3 positions
    }
    std::vector<float> q(qsl.back() * nh * hd);
    for (float& x : q) x = nd(rng) * 0.05f;
    PagedAttentionBatch b;
    b.num_seqs = static_cast<int64_t>(lens.size());
    b.query_start_loc = qsl.data();
    b.seq_lens = lens.data();
    b.block_tables = tables.data();
    b.max_blocks_per_seq = maxb;
    const float sm = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> out(q.size(), NAN), ref_out(q.size(), NAN);
    paged_attention(c.view, q.data(), b, nh, 0, sm, out.data());
    ref::paged_attention(c.view, q.data(), b, nh, 0, sm, ref_out.data());
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int64_t r = qsl[s]; r < qsl[s + 1]; ++r) {
        const int64_t pos = lens[s] - (qsl[s + 1] - r);
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t kvh = h / group;
          std::vector<std::vector<float>> K, V;
          float vmax = 0;
          for (int64_t p = 0; p <= pos; ++p) {
            const int64_t slot = tables[s * maxb + p / block_size] * block_size + p % block_size;
            std::vector<float> kr(hd), vr(hd);
            for (int64_t d = 0; d < hd; ++d) {
              kr[d] = fp8_e4m3_to_float(c.k[(slot * nkv + kvh) * hd + d]) * c.ks[slot * nkv + kvh];
              vr[d] = fp8_e4m3_to_float(c.v[(slot * nkv + kvh) * hd + d]) * c.vs[slot * nkv + kvh];
              vmax = std::max(vmax, std::fabs(vr[d]));
            }
            K.push_back(kr);
            V.push_back(vr);
          }
          std::vector<float> expect(hd);
          plain_attention(&q[(r * nh + h) * hd], K, V, sm, expect.data());
          for (int64_t d = 0; d < hd; ++d) {
            const size_t i = (r * nh + h) * hd + d;
            REQUIRE(out[i] == Approx(expect[d]).margin(1e-5 * vmax + 1e-6));
            REQUIRE(ref_out[i] == Approx(expect[d]).margin(1e-5 * vmax + 1e-6));
          }
        }
      }
    }
  }
}

TEST_CASE("per-token-head: a sequence's output is bitwise the same alone and in a batch of 16",
          "[paged_attention][token_scale]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const int64_t nkv = 2, nh = 4, hd = 32, bs = 16, nseq = 16;
  std::vector<int64_t> lens(nseq);
  for (auto& l : lens) l = 1 + rng() % 400;
  int64_t blocks = 0;
  for (int64_t l : lens) blocks += (l + bs - 1) / bs;
  TokenCache c(blocks, bs, nkv, hd);
  const int64_t maxb = (400 + bs - 1) / bs;
  std::vector<int32_t> tables(nseq * maxb, 0);
  int32_t next = 0;
  for (int64_t s = 0; s < nseq; ++s) {
    for (int64_t b = 0; b < (lens[s] + bs - 1) / bs; ++b) tables[s * maxb + b] = next++;
    std::vector<float> k(lens[s] * nkv * hd), v(k.size());
    for (float& x : k) x = nd(rng) * 3;
    for (float& x : v) x = nd(rng);
    std::vector<int64_t> slots(lens[s]);
    for (int64_t p = 0; p < lens[s]; ++p) slots[p] = tables[s * maxb + p / bs] * bs + p % bs;
    write_kv_cache(c.view, k.data(), v.data(), slots.data(), lens[s]);
  }
  std::vector<int64_t> qsl(nseq + 1);
  for (int64_t s = 0; s < nseq; ++s)
    qsl[s + 1] = qsl[s] + (s % 3 == 0 ? std::min<int64_t>(lens[s], 5) : 1);
  std::vector<float> q(qsl[nseq] * nh * hd);
  for (float& x : q) x = nd(rng) * 0.2f;
  PagedAttentionBatch b{nseq, qsl.data(), lens.data(), tables.data(), maxb};
  std::vector<float> all(q.size());
  paged_attention(c.view, q.data(), b, nh, 0, 0.17f, all.data());
  const int saved = omp_get_max_threads();
  for (int threads : {1, saved}) {
    omp_set_num_threads(threads);
    for (int64_t s = 0; s < nseq; ++s) {
      const int64_t nq = qsl[s + 1] - qsl[s];
      const int64_t one_qsl[2] = {0, nq};
      PagedAttentionBatch one{1, one_qsl, &lens[s], &tables[s * maxb], maxb};
      std::vector<float> alone(nq * nh * hd);
      paged_attention(c.view, &q[qsl[s] * nh * hd], one, nh, 0, 0.17f, alone.data());
      REQUIRE(std::memcmp(alone.data(), &all[qsl[s] * nh * hd], alone.size() * 4) == 0);
    }
  }
  omp_set_num_threads(saved);
}
