// Paged KV cache kernels: write_kv_cache against the scalar conversions of fp8.h / half.h,
// paged_attention against a hand-computed case and against ref::paged_attention (which gathers
// the dequantized K/V and calls ref::attention), batch and thread-count invariance, scales.
//
// Tolerance against the reference: both read the same dequantized values and compute in FP32;
// only summation orders (dot products, softmax sum, weighted sum, partition fold) and the
// vector exp (<= 2 ulp against std::exp) differ, so outputs (convex combinations of V) agree to
// 1e-5 x max|V| (+1e-6 absolute).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/cpu/fp8.h"
#include "kernels/common/half.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_bench.h"
#include "kernels/cpu/paged_attention_kernel.h"

using namespace octet;

namespace {

constexpr DType kAllDTypes[] = {DType::BF16, DType::F16,
                                       DType::FP8_E4M3, DType::FP8_E5M2};

// One layer's cache with its own storage.
struct TestCache {
  std::vector<uint8_t> k, v;
  std::vector<float> k_scale, v_scale;
  KVCacheView view;
  TestCache(DType dtype, int64_t num_blocks, int64_t block_size, int64_t nkv, int64_t hd)
      : k(static_cast<size_t>(num_blocks * block_size * nkv * hd * dtype_bytes(dtype)),
          0xAB),
        v(k.size(), 0xCD) {
    for (int64_t h = 0; h < nkv; ++h) {  // distinct per-head scales, E4M3- or E5M2-sized
      const float unit = dtype == DType::FP8_E5M2 ? 1.0f / 8192 : 1.0f / 64;
      k_scale.push_back(unit * static_cast<float>(1 + h));
      v_scale.push_back(unit * static_cast<float>(3 + 2 * h) * 0.5f);
    }
    view = {k.data(), v.data(), dtype, num_blocks, block_size, nkv, hd,
            k_scale.data(), v_scale.data()};
  }
};

// A sequence of the batch: its cached context length after this step and its query count.
struct SeqSpec {
  int64_t seq_len, num_queries;
};

// Sequences stored in one cache at shuffled blocks, with their K/V in FP32 and queries.
struct Scene {
  TestCache cache;
  int64_t num_heads, nkv, hd, max_blocks;
  std::vector<SeqSpec> seqs;
  std::vector<std::vector<int32_t>> tables;  // per sequence, max_blocks entries
  std::vector<std::vector<float>> queries;   // per sequence, [num_queries, num_heads, hd]
  float vmax = 0;                            // max |dequantized V|

  Scene(DType dtype, int64_t block_size, int64_t num_heads_, int64_t nkv_, int64_t hd_,
        std::vector<SeqSpec> specs, uint32_t seed)
      : cache(dtype, blocks_needed(specs, block_size) + 3, block_size, nkv_, hd_),
        num_heads(num_heads_), nkv(nkv_), hd(hd_), seqs(std::move(specs)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    max_blocks = 0;
    for (const SeqSpec& s : seqs)
      max_blocks = std::max(max_blocks, (s.seq_len + block_size - 1) / block_size);
    std::vector<int32_t> ids(static_cast<size_t>(cache.view.num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    const int64_t row = nkv * hd;
    for (const SeqSpec& s : seqs) {
      const int64_t nb = (s.seq_len + block_size - 1) / block_size;
      std::vector<int32_t> table(static_cast<size_t>(max_blocks), -1);
      for (int64_t b = 0; b < nb; ++b) table[b] = ids[next++];
      // K/V of every position, written in one call with padding tokens (slot -1) between.
      std::vector<float> k, v;
      std::vector<int64_t> slots;
      for (int64_t p = 0; p < s.seq_len; ++p) {
        for (int64_t i = 0; i < row; ++i) {
          k.push_back(nd(rng));
          v.push_back(nd(rng));
        }
        slots.push_back(table[p / block_size] * block_size + p % block_size);
        if (p % 5 == 2) {
          for (int64_t i = 0; i < row; ++i) k.push_back(1e30f), v.push_back(-1e30f);
          slots.push_back(-1);
        }
      }
      write_kv_cache(cache.view, k.data(), v.data(), slots.data(),
                     static_cast<int64_t>(slots.size()));
      std::vector<float> q(static_cast<size_t>(s.num_queries * num_heads * hd));
      for (float& x : q) x = nd(rng);
      tables.push_back(std::move(table));
      queries.push_back(std::move(q));
    }
    // max |V| as the kernels see it: decode every stored V element of the used slots.
    for (size_t si = 0; si < seqs.size(); ++si)
      for (int64_t p = 0; p < seqs[si].seq_len; ++p) {
        const int64_t slot = tables[si][p / block_size] * block_size + p % block_size;
        for (int64_t i = 0; i < row; ++i) vmax = std::max(vmax, std::fabs(v_value(slot, i)));
      }
  }

  static int64_t blocks_needed(const std::vector<SeqSpec>& specs, int64_t bs) {
    int64_t n = 0;
    for (const SeqSpec& s : specs) n += (s.seq_len + bs - 1) / bs;
    return n;
  }

  float v_value(int64_t slot, int64_t i) const {
    const int64_t e = slot * nkv * hd + i;
    uint16_t h;
    switch (cache.view.dtype) {
      case DType::BF16: std::memcpy(&h, &cache.v[2 * e], 2); return bf16_to_float(h);
      case DType::F16: std::memcpy(&h, &cache.v[2 * e], 2); return fp16_to_float(h);
      case DType::FP8_E4M3: return fp8_e4m3_to_float(cache.v[e]) * cache.v_scale[i / hd];
      case DType::FP8_E5M2: return fp8_e5m2_to_float(cache.v[e]) * cache.v_scale[i / hd];
      case DType::F32: {
        float f;
        std::memcpy(&f, &cache.v[4 * e], 4);
        return f;
      }
    }
    return 0;
  }

  // The batch made of the sequences `order` (indices into seqs), in that order.
  struct Batch {
    std::vector<int64_t> qsl, lens;
    std::vector<int32_t> tables;
    std::vector<float> q;
    PagedAttentionBatch view;
  };
  Batch batch(const std::vector<int>& order) const {
    Batch b;
    b.qsl.push_back(0);
    for (int i : order) {
      b.qsl.push_back(b.qsl.back() + seqs[i].num_queries);
      b.lens.push_back(seqs[i].seq_len);
      b.tables.insert(b.tables.end(), tables[i].begin(), tables[i].end());
      b.q.insert(b.q.end(), queries[i].begin(), queries[i].end());
    }
    b.view = {static_cast<int64_t>(order.size()), b.qsl.data(), b.lens.data(), b.tables.data(),
              max_blocks};
    return b;
  }
  std::vector<int> all() const {
    std::vector<int> o(seqs.size());
    std::iota(o.begin(), o.end(), 0);
    return o;
  }
};

std::vector<paged_detail::Kernel> kernels_here() {
  std::vector<paged_detail::Kernel> ks{paged_detail::scalar_kernel()};
  if (paged_detail::avx2_kernel_available()) ks.push_back(paged_detail::avx2_kernel());
  if (paged_detail::avx512_kernel_available()) ks.push_back(paged_detail::avx512_kernel());
  return ks;
}

std::vector<float> run_kernel(const paged_detail::Kernel& kernel, const Scene& s,
                              const Scene::Batch& b, int64_t window, float softmax_scale) {
  std::vector<float> out(b.q.size(), -7.0f);
  paged_detail::paged_attention_with(kernel, s.cache.view, b.q.data(), b.view, s.num_heads,
                                     window, softmax_scale, out.data());
  return out;
}

std::vector<float> run_ref(const Scene& s, const Scene::Batch& b, int64_t window,
                           float softmax_scale) {
  std::vector<float> out(b.q.size(), -7.0f);
  ref::paged_attention(s.cache.view, b.q.data(), b.view, s.num_heads, window, softmax_scale,
                       out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const float* b, size_t n) {
  return a.size() == n && std::memcmp(a.data(), b, n * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("kv_cache_dtype names and sizes", "[paged_attention]") {
  CHECK(std::string(kv_cache_dtype_name(DType::BF16)) == "bf16");
  CHECK(std::string(kv_cache_dtype_name(DType::F16)) == "fp16");
  CHECK(std::string(kv_cache_dtype_name(DType::FP8_E4M3)) == "fp8_e4m3");
  CHECK(std::string(kv_cache_dtype_name(DType::FP8_E5M2)) == "fp8_e5m2");
  CHECK(dtype_bytes(DType::BF16) == 2);
  CHECK(dtype_bytes(DType::FP8_E5M2) == 1);
  CHECK(dtype_is_fp8(DType::FP8_E4M3));
  CHECK_FALSE(dtype_is_fp8(DType::F16));
}

TEST_CASE("write_kv_cache stores the scalar conversions bit for bit", "[paged_attention]") {
  const int64_t nkv = 3, hd = 37, block_size = 4, num_blocks = 5, n = 9;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  // Values across the FP8 ranges (saturation, subnormals, signed zero), NaN and inf too.
  std::vector<float> k(n * nkv * hd), v(n * nkv * hd);
  const float specials[] = {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-30f, -3e5f, 7e4f};
  for (size_t i = 0; i < k.size(); ++i) {
    const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 24);
    k[i] = i % 17 == 0 ? specials[(i / 17) % 9] : nd(rng) * mag;
    v[i] = i % 13 == 0 ? specials[(i / 13) % 9] : nd(rng) * mag;
  }
  const std::vector<int64_t> slots = {7, -1, 0, 19, 3, -5, 12, 8, 1};
  for (DType dtype : kAllDTypes) {
    INFO(kv_cache_dtype_name(dtype));
    TestCache c(dtype, num_blocks, block_size, nkv, hd);
    c.k_scale = {0.5f, 3.0f, 1.0f / 1024};  // different per head; ignored by bf16/fp16
    c.v_scale = {7.0f, 0.125f, 0.3f};
    c.view.k_scale = c.k_scale.data();
    c.view.v_scale = c.v_scale.data();
    write_kv_cache(c.view, k.data(), v.data(), slots.data(), n);
    std::vector<bool> written(num_blocks * block_size, false);
    const int64_t bytes = dtype_bytes(dtype);
    for (int64_t i = 0; i < n; ++i) {
      if (slots[i] < 0) continue;
      written[slots[i]] = true;
      for (int64_t h = 0; h < nkv; ++h)
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t src = (i * nkv + h) * hd + d, dst = (slots[i] * nkv + h) * hd + d;
          for (int which = 0; which < 2; ++which) {
            const float x = which ? v[src] : k[src];
            const float s = which ? c.v_scale[h] : c.k_scale[h];
            const std::vector<uint8_t>& store = which ? c.v : c.k;
            uint32_t expected = 0, got = 0;
            switch (dtype) {
              case DType::BF16: expected = float_to_bf16(x); break;
              case DType::F16: expected = float_to_fp16(x); break;
              case DType::FP8_E4M3: expected = fp8_e4m3_from_float(x / s); break;
              case DType::FP8_E5M2: expected = fp8_e5m2_from_float(x / s); break;
              case DType::F32: std::memcpy(&expected, &x, 4); break;
            }
            std::memcpy(&got, &store[dst * bytes], static_cast<size_t>(bytes));
            INFO("token " << i << " head " << h << " d " << d << " x " << x << " which " << which);
            REQUIRE(got == expected);
          }
        }
    }
    // Slots that no token (or only a padding token) maps to keep their old bytes.
    for (int64_t slot = 0; slot < num_blocks * block_size; ++slot) {
      if (written[slot]) continue;
      for (int64_t e = 0; e < nkv * hd * bytes; ++e) {
        REQUIRE(c.k[slot * nkv * hd * bytes + e] == 0xAB);
        REQUIRE(c.v[slot * nkv * hd * bytes + e] == 0xCD);
      }
    }
  }
}

TEST_CASE("paged_attention: hand-computed two-token case", "[paged_attention]") {
  // 1 head, head_dim 2, block_size 1 with blocks {1, 0}: position 0 is in block 1, 1 in 0.
  // k0 = (1, 0), k1 = (0, 1), v0 = (4, 0), v1 = (0, 8); both tokens are queries (prefill).
  // Query 0 sees only position 0: out = v0.
  // Query 1 = (1, 1): scores 1 and 1, weights 1/2 each: out = (2, 4), exact.
  // Query 1 = (ln 3, 0) would be scores ln 3, 0: weights 3/4, 1/4 (checked to 1e-6).
  const float k[] = {1, 0, 0, 1}, v[] = {4, 0, 0, 8};
  const int64_t slots[] = {1, 0};
  for (DType dtype : kAllDTypes)
    for (const paged_detail::Kernel& kernel : kernels_here()) {
      INFO(kv_cache_dtype_name(dtype) << " " << kernel.name);
      TestCache c(dtype, 2, 1, 1, 2);
      c.k_scale = {0.5f};  // FP8: codes 2, 0 and 8, 16 stand for 1, 0 and 4, 8: exact
      c.v_scale = {0.5f};
      write_kv_cache(c.view, k, v, slots, 2);
      const int64_t qsl[] = {0, 2}, lens[] = {2};
      const int32_t table[] = {1, 0};
      const PagedAttentionBatch b{1, qsl, lens, table, 2};
      {
        const float q[] = {5, -3, 1, 1};
        float out[4];
        paged_detail::paged_attention_with(kernel, c.view, q, b, 1, 0, 1.0f, out);
        CHECK(out[0] == 4.0f);
        CHECK(out[1] == 0.0f);
        CHECK(out[2] == 2.0f);
        CHECK(out[3] == 4.0f);
        // Window 1: each query sees itself only.
        paged_detail::paged_attention_with(kernel, c.view, q, b, 1, 1, 1.0f, out);
        CHECK(out[2] == 0.0f);
        CHECK(out[3] == 8.0f);
      }
      {
        const float q[] = {0, 0, std::log(3.0f), 0};
        float out[4];
        paged_detail::paged_attention_with(kernel, c.view, q, b, 1, 0, 1.0f, out);
        CHECK(out[2] == Approx(3.0f).margin(1e-6));  // 3/4 * 4
        CHECK(out[3] == Approx(2.0f).margin(1e-6));  // 1/4 * 8
        // softmax_scale 2: weights 9/10, 1/10.
        paged_detail::paged_attention_with(kernel, c.view, q, b, 1, 0, 2.0f, out);
        CHECK(out[2] == Approx(3.6f).margin(1e-6));
        CHECK(out[3] == Approx(0.8f).margin(1e-6));
      }
    }
}

TEST_CASE("paged_attention matches ref::paged_attention", "[paged_attention]") {
  // Mixed batch: a one-token sequence, decodes over 1..3 partitions (256 positions each), a
  // whole prompt as prefill, and prefill chunks after cached tokens crossing partition bounds.
  const std::vector<SeqSpec> specs = {{1, 1}, {300, 1}, {45, 45}, {530, 17}, {600, 1}, {70, 9}};
  int cases = 0;
  for (int64_t hd : {64, 128})
    for (auto [nh, nkv] : {std::pair<int64_t, int64_t>{4, 4}, {9, 3}, {8, 2}})
      for (int64_t bs : {1, 16, 32})
        for (DType dtype : kAllDTypes) {
          const Scene s(dtype, bs, nh, nkv, hd, specs, static_cast<uint32_t>(hd + nh + bs));
          const Scene::Batch b = s.batch(s.all());
          const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
          for (int64_t window : {0, 7, 32}) {
            const std::vector<float> want = run_ref(s, b, window, scale);
            for (const paged_detail::Kernel& kernel : kernels_here()) {
              const std::vector<float> got = run_kernel(kernel, s, b, window, scale);
              float worst = 0;
              for (size_t i = 0; i < got.size(); ++i)
                worst = std::max(worst, std::fabs(got[i] - want[i]));
              INFO(kv_cache_dtype_name(dtype) << " " << kernel.name << " hd " << hd << " heads "
                                              << nh << "/" << nkv << " block " << bs
                                              << " window " << window << " vmax " << s.vmax);
              REQUIRE(worst <= 1e-5f * s.vmax + 1e-6f);
              ++cases;
            }
          }
        }
  CHECK(cases > 0);
}

TEST_CASE("paged_attention: other head sizes, groups and block sizes", "[paged_attention]") {
  // Head dims off the 64-lane grid and past the AVX-512 kernel's 256; groups of 1, 2, 5 and 8
  // query heads per KV head (split into blocks of at most 4 by the vector kernels); block size 5.
  const std::vector<SeqSpec> specs = {{260, 1}, {33, 5}};
  struct Shape {
    int64_t hd, nh, nkv, bs;
  };
  const Shape shapes[] = {{8, 6, 2, 16},   {40, 6, 2, 16},  {80, 6, 2, 5},   {96, 6, 2, 16},
                          {200, 6, 2, 16}, {320, 6, 2, 16}, {64, 10, 2, 16}, {64, 16, 2, 5},
                          {128, 10, 2, 16}, {128, 8, 1, 16}, {192, 5, 1, 16},
                          // one and two query heads per KV head (the AVX2 kernel's V chunks
                          // of 64, 48, 32 and 16 elements), head dims 8k but not 16k, and 60;
                          // 6 and 7 query heads (a last block of 2 and 3); 32 KV heads (runs of
                          // them in one kernel call)
                          {64, 4, 4, 16},  {72, 2, 2, 5},   {40, 4, 2, 16},  {60, 3, 3, 16},
                          {40, 2, 2, 16},  {96, 2, 2, 16},  {64, 12, 2, 16}, {32, 7, 1, 16},
                          {64, 32, 32, 16}};
  for (const Shape& sh : shapes)
    for (DType dtype : kAllDTypes) {
      const int64_t hd = sh.hd;
      const Scene s(dtype, sh.bs, sh.nh, sh.nkv, hd, specs, static_cast<uint32_t>(hd + sh.nh));
      const Scene::Batch b = s.batch(s.all());
      const std::vector<float> want = run_ref(s, b, 0, 0.1f);
      for (const paged_detail::Kernel& kernel : kernels_here()) {
        if (hd > kernel.max_head_dim) continue;
        const std::vector<float> got = run_kernel(kernel, s, b, 0, 0.1f);
        INFO(kv_cache_dtype_name(dtype) << " " << kernel.name << " hd " << hd << " heads "
                                        << sh.nh << "/" << sh.nkv << " block " << sh.bs);
        for (size_t i = 0; i < got.size(); ++i)
          REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f * s.vmax + 1e-6f);
      }
      // The public entry point picks a kernel that takes this head size.
      std::vector<float> out(b.q.size());
      paged_attention(s.cache.view, b.q.data(), b.view, s.num_heads, 0, 0.1f, out.data());
      for (size_t i = 0; i < out.size(); ++i)
        REQUIRE(std::fabs(out[i] - want[i]) <= 1e-5f * s.vmax + 1e-6f);
    }
}

TEST_CASE("paged_attention is batch- and thread-count invariant, bitwise", "[paged_attention]") {
  // Sequence 0: decode over 3 partitions; 1: prefill chunk over cached tokens; 2, 3: others,
  // among them a long prefill that makes the batch take the one-item-per-query split.
  const std::vector<SeqSpec> specs = {{700, 1}, {540, 20}, {90, 90}, {300, 1}};
  const int saved_threads = omp_get_max_threads();
  for (DType dtype : {DType::BF16, DType::FP8_E4M3})
    for (int64_t window : {0, 100})
      for (const paged_detail::Kernel& kernel : kernels_here()) {
        INFO(kv_cache_dtype_name(dtype) << " " << kernel.name << " window " << window);
        const Scene s(dtype, 16, 9, 3, 64, specs, 5);
        const size_t row = 9 * 64;
        // Alone, one thread: the reference results per sequence.
        omp_set_num_threads(1);
        std::vector<std::vector<float>> alone;
        for (int i = 0; i < 4; ++i) alone.push_back(run_kernel(kernel, s, s.batch({i}), window, 0.125f));
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          for (const std::vector<int>& order :
               {std::vector<int>{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 0}, {0}, {1}}) {
            const Scene::Batch b = s.batch(order);
            const std::vector<float> out = run_kernel(kernel, s, b, window, 0.125f);
            size_t offset = 0;
            for (int i : order) {
              const size_t n = static_cast<size_t>(s.seqs[i].num_queries) * row;
              INFO("threads " << threads << " sequence " << i << " of " << order.size());
              REQUIRE(same_bits(alone[i], out.data() + offset, n));
              offset += n;
            }
          }
        }
      }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("paged_attention: a prefill chunk's rows equal each query run alone, bitwise",
          "[paged_attention]") {
  // Rows of one sequence share kernel calls (Kernel::max_query_vectors); each must still get
  // the bits of a decode step at its position: chunks across a partition boundary (positions
  // 240-269, 591-599), a whole prompt, one query, windows that start rows apart, MHA and GQA,
  // head sizes that take the row-at-a-time fallback.
  struct Shape {
    int64_t nh, nkv, hd;
  };
  for (const Shape sh : {Shape{4, 4, 64}, Shape{4, 2, 64}, Shape{6, 2, 64}, Shape{3, 3, 40}})
    for (DType dtype : {DType::F32, DType::BF16, DType::FP8_E4M3, DType::FP8_E5M2})
      for (int64_t window : {0, 100})
        for (const paged_detail::Kernel& kernel : kernels_here()) {
          // F32 caches never take the AVX-512 kernel (paged_attention.cpp routes them to AVX2
          // or the portable one); it refuses them.
          if (dtype == DType::F32 &&
              std::string(kernel.name) == paged_detail::avx512_kernel().name)
            continue;
          INFO(sh.nh << "/" << sh.nkv << " x " << sh.hd << " " << kv_cache_dtype_name(dtype)
                     << " " << kernel.name << " window " << window);
          const Scene s(dtype, 16, sh.nh, sh.nkv, sh.hd, {{270, 30}, {37, 37}, {600, 9}, {5, 1}},
                        11);
          const std::vector<float> all = run_kernel(kernel, s, s.batch(s.all()), window, 0.125f);
          const int64_t row = sh.nh * sh.hd;
          int64_t at = 0;
          for (size_t si = 0; si < s.seqs.size(); ++si)
            for (int64_t q = 0; q < s.seqs[si].num_queries; ++q, ++at) {
              const int64_t position = s.seqs[si].seq_len - s.seqs[si].num_queries + q;
              std::vector<int64_t> qsl = {0, 1}, lens = {position + 1};
              const PagedAttentionBatch one{1, qsl.data(), lens.data(), s.tables[si].data(),
                                            s.max_blocks};
              std::vector<float> out(static_cast<size_t>(row), -7.0f);
              paged_detail::paged_attention_with(kernel, s.cache.view,
                                                 s.queries[si].data() + q * row, one, sh.nh,
                                                 window, 0.125f, out.data());
              INFO("sequence " << si << " position " << position);
              REQUIRE(same_bits(out, all.data() + at * row, static_cast<size_t>(row)));
            }
        }
}

TEST_CASE("paged_attention applies the per-head FP8 scales", "[paged_attention]") {
  const std::vector<SeqSpec> specs = {{300, 1}, {40, 6}};
  for (DType dtype : {DType::FP8_E4M3, DType::FP8_E5M2})
    for (const paged_detail::Kernel& kernel : kernels_here()) {
      INFO(kv_cache_dtype_name(dtype) << " " << kernel.name);
      Scene s(dtype, 16, 6, 2, 64, specs, 9);
      const Scene::Batch b = s.batch(s.all());
      const std::vector<float> base = run_kernel(kernel, s, b, 0, 0.125f);
      const std::vector<float> k0 = s.cache.k_scale, v0 = s.cache.v_scale;
      // Doubling v_scale of KV head 1 doubles exactly the outputs of its query heads 3..5.
      s.cache.v_scale[1] = 2 * v0[1];
      std::vector<float> out = run_kernel(kernel, s, b, 0, 0.125f);
      for (size_t i = 0; i < out.size(); ++i) {
        const bool head1 = (i / 64) % 6 >= 3;
        REQUIRE(out[i] == (head1 ? 2 * base[i] : base[i]));
      }
      s.cache.v_scale = v0;
      // Doubling k_scale of every head equals doubling softmax_scale, bit for bit, and it
      // changes the result.
      for (float& x : s.cache.k_scale) x *= 2;
      out = run_kernel(kernel, s, b, 0, 0.125f);
      s.cache.k_scale = k0;
      CHECK(same_bits(out, run_kernel(kernel, s, b, 0, 0.25f).data(), out.size()));
      float changed = 0;
      for (size_t i = 0; i < out.size(); ++i) changed = std::max(changed, std::fabs(out[i] - base[i]));
      CHECK(changed > 0.01f * s.vmax);
    }
}

TEST_CASE("paged_attention: scale 2 and scale 1 store the same exact values", "[paged_attention]") {
  // Small integers are exact in FP8 under scale 1 and scale 2 (x / 2 is exact too), so the
  // dequantized caches and the attention outputs are the same.
  const int64_t nkv = 2, hd = 64, nh = 4, len = 40;
  std::vector<float> k(len * nkv * hd), v(k.size()), q(nh * hd);
  std::mt19937 rng(2);
  for (float& x : k) x = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f;
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 15) - 7);
  for (float& x : q) x = static_cast<float>(static_cast<int>(rng() % 5) - 2) * 0.25f;
  std::vector<int64_t> slots(len);
  std::iota(slots.begin(), slots.end(), 0);
  const int64_t qsl[] = {0, 1}, lens[] = {len};
  const int32_t table[] = {0, 1, 2};
  const PagedAttentionBatch b{1, qsl, lens, table, 3};
  for (DType dtype : {DType::FP8_E4M3, DType::FP8_E5M2}) {
    std::vector<float> outs[2];
    for (int i = 0; i < 2; ++i) {
      TestCache c(dtype, 3, 16, nkv, hd);
      c.k_scale.assign(nkv, i == 0 ? 1.0f : 2.0f);
      c.v_scale.assign(nkv, i == 0 ? 1.0f : 2.0f);
      c.view.k_scale = c.k_scale.data();
      c.view.v_scale = c.v_scale.data();
      write_kv_cache(c.view, k.data(), v.data(), slots.data(), len);
      if (i == 1) {  // the codes are those of x / 2
        CHECK(c.k[0] == (dtype == DType::FP8_E4M3 ? fp8_e4m3_from_float(k[0] / 2)
                                                           : fp8_e5m2_from_float(k[0] / 2)));
      }
      outs[i].resize(nh * hd);
      paged_attention(c.view, q.data(), b, nh, 0, 0.125f, outs[i].data());
    }
    CHECK(same_bits(outs[0], outs[1].data(), outs[1].size()));
  }
}

TEST_CASE("paged_attention: a NaN in the cache reaches exactly the queries that see it",
          "[paged_attention]") {
  // NaN is stored as NaN (FP8: 0x7F) and every kernel decodes it as NaN: the heads of that KV
  // head whose query sees the position turn NaN, the others stay finite.
  const int64_t nkv = 2, hd = 64, nh = 4, len = 12;
  std::vector<float> k(len * nkv * hd, 0.25f), v(k.size(), 1.0f), q(2 * nh * hd, 0.5f);
  k[(5 * nkv + 0) * hd + 7] = NAN;  // position 5, KV head 0
  std::vector<int64_t> slots(len);
  std::iota(slots.begin(), slots.end(), 0);
  const int64_t qsl[] = {0, 2}, lens[] = {len};
  const int32_t table[] = {0};
  const PagedAttentionBatch b{1, qsl, lens, table, 1};  // queries at positions 10 and 11
  for (DType dtype : kAllDTypes)
    for (const paged_detail::Kernel& kernel : kernels_here())
      for (int64_t window : {0, 6}) {  // window 6 at position 10 sees 5..10, at 11 sees 6..11
        INFO(kv_cache_dtype_name(dtype) << " " << kernel.name << " window " << window);
        TestCache c(dtype, 1, 16, nkv, hd);
        write_kv_cache(c.view, k.data(), v.data(), slots.data(), len);
        std::vector<float> out(q.size());
        paged_detail::paged_attention_with(kernel, c.view, q.data(), b, nh, window, 0.125f,
                                           out.data());
        for (int64_t r = 0; r < 2; ++r)
          for (int64_t h = 0; h < nh; ++h) {
            const bool sees_nan = h < 2 && (window == 0 || r == 0);
            for (int64_t d = 0; d < hd; ++d)
              REQUIRE(std::isnan(out[(r * nh + h) * hd + d]) == sees_nan);
          }
      }
}

TEST_CASE("paged_attention: a NaN in one kernel call's heads stays out of the next call's",
          "[paged_attention]") {
  // 20 KV heads: the AVX2 kernel takes 16 in one call, then 4, in the same scratch; head_dim 60
  // takes its decode-to-L1 path, whose row buffer lies, for 4 heads, where the 16-head call
  // kept head 10's scores of positions 124-127. A NaN at position 125 of head 10 makes those
  // scores NaN: only head 10 may turn NaN.
  const int64_t nkv = 20, hd = 60, nh = 20, len = 130;
  std::vector<float> k(len * nkv * hd), v(k.size(), 1.0f), q(2 * nh * hd, 0.5f);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 13) * 0.02f;
  k[(125 * nkv + 10) * hd + 3] = NAN;
  std::vector<int64_t> slots(len);
  std::iota(slots.begin(), slots.end(), 0);
  const int64_t qsl[] = {0, 2}, lens[] = {len};
  const int32_t table[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const PagedAttentionBatch b{1, qsl, lens, table, 9};  // queries at positions 128 and 129
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);  // both rows' items in one scratch, in order
  for (DType dtype : kAllDTypes)
    for (const paged_detail::Kernel& kernel : kernels_here()) {
      INFO(kv_cache_dtype_name(dtype) << " " << kernel.name);
      TestCache c(dtype, 9, 16, nkv, hd);
      write_kv_cache(c.view, k.data(), v.data(), slots.data(), len);
      std::vector<float> out(q.size());
      paged_detail::paged_attention_with(kernel, c.view, q.data(), b, nh, 0, 0.125f,
                                         out.data());
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t h = 0; h < nh; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            INFO("row " << r << " head " << h);
            REQUIRE(std::isnan(out[(r * nh + h) * hd + d]) == (h == 10));
          }
    }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("paged_attention decode benchmark (SmolLM2 shape)", "[.][bench][paged_attention]") {
  // Run by hand: OMP_WAIT_POLICY=passive build/test_paged_attention "[bench]"
  std::printf("%s", run_paged_attention_benchmark().c_str());
}
