// Backend write_kv_cache and paged_attention against plain host references, on every backend
// (backend_test_support.h): every KV dtype with per-head scales, varlen batches, GQA/MQA/MHA,
// sliding windows, partial blocks, and batch invariance. Tolerances are stated per case, in the
// form and with the eps of test_backend_ops.cpp.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"
#include "kernels/minifloat_reference.h"
#include "kernels/mismatch_log.h"

using namespace octet;
using octet_test::DeviceArray;
using octet_test::device_zeros;
using octet_test::MismatchLog;
using octet_test::to_device;
using octet_test::to_host;

using namespace octet_test;

namespace {

// ---- KV cache: dtypes, encoding, write_kv_cache ------------------------------------------------

/// The KV cache dtypes: every one KVCacheView lists (kernels/common/views.h), F32 (calibration
/// runs) included, so every backend must store and attend over all five.
const DType kKVDTypes[] = {DType::BF16, DType::F16, DType::FP8_E4M3, DType::FP8_E5M2, DType::F32};

// Host encoding of one element as the contract says (backend.h write_kv_cache): 16-bit RNE
// (overflow to inf, NaN -> 0x7FFF), FP8 fp8(x / scale) with FP32 division, RNE, saturation.
void encode_kv(DType d, float x, float scale, uint8_t* dst) {
  switch (d) {
    case DType::F32: std::memcpy(dst, &x, 4); break;
    case DType::BF16: { const uint16_t b = ref_bf16(x); std::memcpy(dst, &b, 2); break; }
    case DType::F16: { const uint16_t b = ref_fp16(x); std::memcpy(dst, &b, 2); break; }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2: *dst = ref_fp8(d, x / scale); break;
  }
}

// Exact FP32 value a kernel reads back: 16-bit values widen exactly; FP8: float(q) * scale.
float decode_kv(DType d, const uint8_t* src, float scale) {
  switch (d) {
    case DType::F32: { float x; std::memcpy(&x, src, 4); return x; }
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, src, 2);
      return static_cast<float>(octet_test::code_value(octet_test::kBf16, b));
    }
    case DType::F16: {
      uint16_t b;
      std::memcpy(&b, src, 2);
      return static_cast<float>(octet_test::code_value(octet_test::kFp16, b));
    }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2: return ref_fp8_value(d, *src) * scale;
  }
  return 0;
}

// Per-KV-head scales for a dtype (distinct per head; FP8 ones map inputs in [-2.5, 2.5] below the
// top code), or empty for 16/32-bit caches (the view then passes null scales). Head 0's scale is
// 61 * 2^e (see fp8_midpoints).
std::vector<float> kv_scales(DType d, int64_t kv_heads, bool v) {
  if (!dtype_is_fp8(d)) return {};
  std::vector<float> s(kv_heads);
  for (int64_t h = 0; h < kv_heads; ++h)
    s[h] = d == DType::FP8_E4M3 ? (h == 0 ? 61 * 0x1p-13f : (v ? 0.008f : 0.006f) * (1 + 0.37f * h))
                                : (h == 0 ? kTieScale : (v ? 0.5f : 0.25f) * float(1 << h));
  return s;
}

// Bit-exact: the contract fixes every stored byte; skipped (negative) slots and unwritten slots
// keep the cache's previous bytes.
void write_kv_cache_case(Backend& be) {
  std::mt19937 rng(11);
  const int64_t num_blocks = 4, block_size = 16, kv_heads = 3, head_dim = 36;
  const int64_t row = kv_heads * head_dim;  // elements per slot
  for (DType dtype : kKVDTypes) {
    const int64_t eb = dtype_bytes(dtype);
    const int64_t cache_bytes = num_blocks * block_size * row * eb;
    std::vector<uint8_t> sentinel(cache_bytes);
    for (int64_t i = 0; i < cache_bytes; ++i) sentinel[i] = static_cast<uint8_t>(0xA5 ^ (i * 13));
    const std::vector<float> k_scale = kv_scales(dtype, kv_heads, false);
    const std::vector<float> v_scale = kv_scales(dtype, kv_heads, true);
    const auto d_ks = to_device(be, k_scale);
    const auto d_vs = to_device(be, v_scale);
    for (const std::vector<int64_t>& slots :
         {std::vector<int64_t>{47},
          std::vector<int64_t>{5, -1, 63, 0, 17, 16, -7, 40, 31, 32, 2}}) {
      const int64_t n = static_cast<int64_t>(slots.size());
      CAPTURE(dtype_name(dtype), n);
      std::vector<float> k = uniform(rng, n * row, -2.5f, 2.5f);
      std::vector<float> v = uniform(rng, n * row, -2.5f, 2.5f);
      if (n > 4) {
        // Head 0 of tokens 0..2: FP8 scale * midpoints (ties of x / scale, see fp8_midpoints);
        // heads 1 and 2: BF16 and F16 ties (RNE, not truncation or half up). Others random.
        const std::vector<float> mids = dtype_is_fp8(dtype) ? fp8_midpoints(dtype)
                                                            : std::vector<float>{};
        const float bf16_ties[] = {std::bit_cast<float>(0x3F808000u),   // -> 0x3F80
                                   std::bit_cast<float>(0x3F818000u),   // -> 0x3F82
                                   std::bit_cast<float>(0xBFC08000u)};  // -> 0xBFC0
        const float fp16_ties[] = {1.0f + 0x1p-11f,      // -> 1.0 (0x3C00)
                                   1.0f + 3 * 0x1p-11f,  // -> 1 + 2^-9 (0x3C02)
                                   -(2.0f + 0x1p-10f)};  // -> -2.0 (0xC000)
        for (int64_t t = 0; t < 3; ++t)
          for (int64_t j = 0; j < head_dim; ++j) {
            float* kt = k.data() + t * row;
            float* vt = v.data() + t * row;
            if (!mids.empty()) {
              const float mid = mids[static_cast<size_t>(t * head_dim + j) % mids.size()];
              kt[j] = k_scale[0] * (j % 2 ? mid : -mid);
              vt[j] = v_scale[0] * mid;
            }
            kt[head_dim + j] = bf16_ties[j % 3];
            vt[2 * head_dim + j] = fp16_ties[j % 3];
          }
        k[3 * row + 3] = 1e6f;              // FP8: saturates; BF16: finite; F16: inf
        k[row + 4 + 2 * head_dim] = -1e6f;  // a skipped token's value
        k[5 * row + 5] = kNaN;              // NaN stays NaN
        v[3 * row + 7] = -0.0f;             // keeps its sign
        v[3 * row + 2] = 1e-7f;             // FP8 subnormal or zero after scaling
        v[4 * row + 35] = 70000.0f;         // F16: rounds to inf
      }
      const auto d_k = to_device(be, k);
      const auto d_v = to_device(be, v);
      const auto d_slots = to_device(be, slots);
      Buffer kc = be.allocate(cache_bytes), vc = be.allocate(cache_bytes);
      be.upload(kc, 0, sentinel.data(), cache_bytes);
      be.upload(vc, 0, sentinel.data(), cache_bytes);
      KVCacheView view{kc.data(), vc.data(), dtype, num_blocks, block_size, kv_heads, head_dim,
                       k_scale.empty() ? nullptr : d_ks.data(),
                       v_scale.empty() ? nullptr : d_vs.data()};
      be.write_kv_cache(view, d_k.data(), d_v.data(), d_slots.data(), n);
      std::vector<uint8_t> k_expect = sentinel, v_expect = sentinel;
      for (int64_t t = 0; t < n; ++t) {
        if (slots[t] < 0) continue;
        for (int64_t h = 0; h < kv_heads; ++h)
          for (int64_t j = 0; j < head_dim; ++j) {
            const int64_t src = t * row + h * head_dim + j;
            const int64_t dst = (slots[t] * row + h * head_dim + j) * eb;
            encode_kv(dtype, k[src], k_scale.empty() ? 1.0f : k_scale[h], &k_expect[dst]);
            encode_kv(dtype, v[src], v_scale.empty() ? 1.0f : v_scale[h], &v_expect[dst]);
          }
      }
      std::vector<uint8_t> k_got(cache_bytes), v_got(cache_bytes);
      be.download(kc, 0, k_got.data(), cache_bytes);
      be.download(vc, 0, v_got.data(), cache_bytes);
      check_identical(k_got, k_expect, "K cache bytes");
      check_identical(v_got, v_expect, "V cache bytes");
    }
  }
}
BACKEND_TEST_CASE("write_kv_cache every KV dtype with per-head scales and negative slots",
                  write_kv_cache_case)

// rope_write_kv (one kernel on CUDA) against rope then write_kv_cache on the same backend, bit
// for bit: q and k after, and every cache byte, for every KV dtype, both pair layouts, full and
// partial rotary dims (the unrotated dims of k stored too), GQA, skipped slots.
void rope_write_kv_case(Backend& be) {
  std::mt19937 rng(12);
  const int64_t num_blocks = 4, block_size = 16, kv_heads = 2, q_heads = 6, head_dim = 16;
  const int64_t row = kv_heads * head_dim, n = 7;
  const std::vector<int64_t> slots = {5, -1, 63, 0, 17, 40, 31};
  const std::vector<int64_t> positions = {0, 1, 9, 300, 511, 512, 4000};
  for (DType dtype : kKVDTypes)
    for (const RopeLayout layout : {RopeLayout::HalfSplit, RopeLayout::AdjacentPairs})
      for (const int64_t rot_dim : {head_dim, int64_t{10}}) {
        CAPTURE(dtype_name(dtype), static_cast<int>(layout), rot_dim);
        const int64_t cache_bytes = num_blocks * block_size * row * dtype_bytes(dtype);
        const std::vector<float> k_scale = kv_scales(dtype, kv_heads, false);
        const std::vector<float> v_scale = kv_scales(dtype, kv_heads, true);
        const std::vector<float> q = uniform(rng, n * q_heads * head_dim, -3, 3);
        const std::vector<float> k = uniform(rng, n * row, -3, 3);
        const std::vector<float> v = uniform(rng, n * row, -3, 3);
        std::vector<float> inv_freq;
        for (int64_t i = 0; i < rot_dim / 2; ++i)
          inv_freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) /
                                                    static_cast<float>(rot_dim)));
        const auto d_ks = to_device(be, k_scale), d_vs = to_device(be, v_scale);
        const auto d_v = to_device(be, v), d_freq = to_device(be, inv_freq);
        const auto d_pos = to_device(be, positions);
        const auto d_slots = to_device(be, slots);
        std::vector<std::vector<uint8_t>> caches;
        std::vector<std::vector<float>> qk;
        for (int fused = 0; fused < 2; ++fused) {
          auto d_q = to_device(be, q), d_k = to_device(be, k);
          Buffer kc = be.allocate(cache_bytes), vc = be.allocate(cache_bytes);
          const std::vector<uint8_t> zeros(static_cast<size_t>(cache_bytes), 0x5A);
          be.upload(kc, 0, zeros.data(), cache_bytes);
          be.upload(vc, 0, zeros.data(), cache_bytes);
          const KVCacheView view{kc.data(), vc.data(), dtype, num_blocks, block_size, kv_heads,
                                 head_dim, k_scale.empty() ? nullptr : d_ks.data(),
                                 v_scale.empty() ? nullptr : d_vs.data()};
          if (fused) {
            be.rope_write_kv(d_q.data(), d_k.data(), d_v.data(), n, q_heads, kv_heads, head_dim,
                             rot_dim, d_pos.data(), d_freq.data(), layout, view, d_slots.data());
          } else {
            be.rope(d_q.data(), d_k.data(), n, q_heads, kv_heads, head_dim, rot_dim, d_pos.data(),
                    d_freq.data(), layout);
            be.write_kv_cache(view, d_k.data(), d_v.data(), d_slots.data(), n);
          }
          std::vector<uint8_t> bytes(static_cast<size_t>(2 * cache_bytes));
          be.download(kc, 0, bytes.data(), cache_bytes);
          be.download(vc, 0, bytes.data() + cache_bytes, cache_bytes);
          caches.push_back(bytes);
          std::vector<float> out = to_host(be, d_q), kk = to_host(be, d_k);
          out.insert(out.end(), kk.begin(), kk.end());
          qk.push_back(out);
        }
        check_identical(qk[1], qk[0], "q and k after rope_write_kv vs rope");
        check_identical(caches[1], caches[0], "cache bytes of rope_write_kv vs write_kv_cache");
        CHECK(std::vector<float>(qk[0].begin(), qk[0].begin() + q.size()) != q);  // rotated
      }
}
BACKEND_TEST_CASE("rope_write_kv equals rope then write_kv_cache bit for bit", rope_write_kv_case)

// ---- paged_attention ----------------------------------------------------------------------------

struct SeqSpec {
  int64_t seq_len, num_queries;
};

// A paged cache filled on the host (reference encoding, shuffled block ids, block-table padding
// pointing at other sequences' blocks so that reading past a sequence's blocks shows), with the
// exact FP32 values a kernel reads back, and the batch arrays in backend memory.
struct AttentionSetup {
  int64_t num_heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  DType dtype = DType::BF16;
  std::vector<SeqSpec> seqs;
  // host
  std::vector<std::vector<float>> k_val, v_val;  // [seq][pos * kv_heads * head_dim + ...]
  std::vector<int64_t> query_start_loc, seq_lens;
  std::vector<int32_t> block_tables;
  int64_t max_blocks_per_seq = 0, num_blocks = 0;
  std::vector<float> q;  // [num_tokens, num_heads, head_dim]
  std::vector<float> k_scale, v_scale;
  // device
  Buffer kc, vc;
  DeviceArray<float> d_ks, d_vs, d_q;

  int64_t num_tokens() const { return query_start_loc.back(); }
  KVCacheView view() const {
    return KVCacheView{kc.data(), vc.data(), dtype, num_blocks, block_size, kv_heads, head_dim,
                       k_scale.empty() ? nullptr : d_ks.data(),
                       v_scale.empty() ? nullptr : d_vs.data()};
  }
};

AttentionSetup make_attention(Backend& be, std::mt19937& rng, int64_t num_heads,
                              int64_t kv_heads, int64_t head_dim, int64_t block_size, DType dtype,
                              std::vector<SeqSpec> seqs) {
  AttentionSetup a;
  a.num_heads = num_heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.block_size = block_size;
  a.dtype = dtype;
  a.seqs = std::move(seqs);
  const int64_t row = kv_heads * head_dim, eb = dtype_bytes(dtype);
  const int64_t num_seqs = static_cast<int64_t>(a.seqs.size());
  int64_t total_blocks = 0;
  for (const SeqSpec& s : a.seqs) {
    const int64_t nb = (s.seq_len + block_size - 1) / block_size;
    a.max_blocks_per_seq = std::max(a.max_blocks_per_seq, nb + 1);  // >= 1 padding entry each
    total_blocks += nb;
  }
  a.num_blocks = total_blocks + 2;  // two blocks nobody owns
  std::vector<int32_t> ids(a.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  a.k_scale = kv_scales(dtype, kv_heads, false);
  a.v_scale = kv_scales(dtype, kv_heads, true);
  std::vector<uint8_t> kbytes(a.num_blocks * block_size * row * eb, 0),
      vbytes(kbytes.size(), 0);
  a.block_tables.assign(num_seqs * a.max_blocks_per_seq, 0);
  a.query_start_loc = {0};
  int64_t next_block = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SeqSpec& spec = a.seqs[s];
    const int64_t nb = (spec.seq_len + block_size - 1) / block_size;
    for (int64_t b = 0; b < a.max_blocks_per_seq; ++b)  // padding: some other sequence's block
      a.block_tables[s * a.max_blocks_per_seq + b] =
          b < nb ? ids[next_block + b] : ids[(next_block + nb) % total_blocks];
    std::vector<float> kv = uniform(rng, spec.seq_len * row, -2.5f, 2.5f);
    std::vector<float> vv = uniform(rng, spec.seq_len * row, -2.5f, 2.5f);
    a.k_val.emplace_back(spec.seq_len * row);
    a.v_val.emplace_back(spec.seq_len * row);
    for (int64_t p = 0; p < spec.seq_len; ++p) {
      const int64_t slot = int64_t{ids[next_block + p / block_size]} * block_size + p % block_size;
      for (int64_t h = 0; h < kv_heads; ++h)
        for (int64_t j = 0; j < head_dim; ++j) {
          const int64_t src = p * row + h * head_dim + j;
          const int64_t dst = (slot * row + h * head_dim + j) * eb;
          const float ks = a.k_scale.empty() ? 1.0f : a.k_scale[h];
          const float vs = a.v_scale.empty() ? 1.0f : a.v_scale[h];
          encode_kv(dtype, kv[src], ks, &kbytes[dst]);
          encode_kv(dtype, vv[src], vs, &vbytes[dst]);
          a.k_val.back()[src] = decode_kv(dtype, &kbytes[dst], ks);
          a.v_val.back()[src] = decode_kv(dtype, &vbytes[dst], vs);
        }
    }
    next_block += nb;
    a.seq_lens.push_back(spec.seq_len);
    a.query_start_loc.push_back(a.query_start_loc.back() + spec.num_queries);
  }
  a.q = uniform(rng, a.num_tokens() * num_heads * head_dim, -2, 2);
  a.kc = be.allocate(static_cast<int64_t>(kbytes.size()));
  a.vc = be.allocate(static_cast<int64_t>(vbytes.size()));
  be.upload(a.kc, 0, kbytes.data(), static_cast<int64_t>(kbytes.size()));
  be.upload(a.vc, 0, vbytes.data(), static_cast<int64_t>(vbytes.size()));
  a.d_ks = to_device(be, a.k_scale);
  a.d_vs = to_device(be, a.v_scale);
  a.d_q = to_device(be, a.q);
  return a;
}

// Runs sequences [first, first + count) of `a` as one batch; returns out [their rows, heads, dim].
std::vector<float> run_attention(Backend& be, const AttentionSetup& a, int64_t first,
                                 int64_t count, int64_t window, float softmax_scale) {
  const int64_t q0 = a.query_start_loc[first], q1 = a.query_start_loc[first + count];
  std::vector<int64_t> qsl;
  for (int64_t s = first; s <= first + count; ++s) qsl.push_back(a.query_start_loc[s] - q0);
  const std::vector<int64_t> lens(a.seq_lens.begin() + first, a.seq_lens.begin() + first + count);
  const std::vector<int32_t> table(a.block_tables.begin() + first * a.max_blocks_per_seq,
                                   a.block_tables.begin() + (first + count) * a.max_blocks_per_seq);
  const int64_t width = a.num_heads * a.head_dim;
  const std::vector<float> q(a.q.begin() + q0 * width, a.q.begin() + q1 * width);
  const auto d_qsl = to_device(be, qsl);
  const auto d_lens = to_device(be, lens);
  const auto d_table = to_device(be, table);
  const auto d_q = to_device(be, q);
  auto d_out = device_zeros<float>(be, (q1 - q0) * width);
  PagedAttentionBatch batch{count, d_qsl.data(), d_lens.data(), d_table.data(),
                            a.max_blocks_per_seq};
  // The host copies, as the model gives them: CUDA on sm_90 then runs decode rows on FlashInfer
  // (flashinfer_decode.h) where it has the shape.
  batch.host_query_start_loc = qsl.data();
  batch.host_seq_lens = lens.data();
  batch.host_block_tables = table.data();
  be.paged_attention(a.view(), d_q.data(), batch, a.num_heads, window, softmax_scale,
                     d_out.data());
  return to_host(be, d_out);
}

// Reference in double over the exact FP32 values the cache holds. Tolerance per output element
// (o = sum_t p_t v_t over the n visible positions):
//   each score errs by <= E = (d + 4) eps * scale * max_t sum_i |q_i k_ti| (FP32 dot of d terms,
//   the FP8 dequantization and scale products), which moves every softmax weight by a relative
//   <= 2E; exp (<= 2 ulp), the FP32 sum of n weights and the normalisation add <= (n + 4) u;
//   the FP32 V sum <= n u sum p_t |v_t|; split-softmax rescaling a few u more. So
//   |o_j - ref_j| <= (4 E + (n + 8) eps) * max_t |v_tj|  (a factor ~2 above the first-order
//   bound).
// Rows of prefills (>= 8 queries) on a backend whose prefill rounds q (x k_scale), P and the
// output to 16 bits (CUDA's FlashInfer prefill: u16 = 2^-8, bf16's unit roundoff x 2) add
// 4 u16 mag (each score) and 3 u16 (P and the output) times max |v|.
void attention_reference(const AttentionSetup& a, int64_t window, float softmax_scale,
                         std::vector<double>& ref, std::vector<double>& tol, double u16 = 0) {
  const int64_t d = a.head_dim, group = a.num_heads / a.kv_heads, row = a.kv_heads * d;
  ref.assign(a.num_tokens() * a.num_heads * d, 0);
  tol.assign(ref.size(), 0);
  for (size_t s = 0; s < a.seqs.size(); ++s) {
    const int64_t nq = a.query_start_loc[s + 1] - a.query_start_loc[s], len = a.seq_lens[s];
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t token = a.query_start_loc[s] + i, pos = len - nq + i;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      for (int64_t h = 0; h < a.num_heads; ++h) {
        const int64_t kvh = h / group;
        const float* qh = a.q.data() + (token * a.num_heads + h) * d;
        std::vector<double> score;
        double mag = 0, mx = -INFINITY;
        for (int64_t p = lo; p <= pos; ++p) {
          const float* kp = a.k_val[s].data() + p * row + kvh * d;
          double dot = 0, m = 0;
          for (int64_t j = 0; j < d; ++j) {
            dot += double(qh[j]) * kp[j];
            m += std::fabs(double(qh[j]) * kp[j]);
          }
          score.push_back(dot * softmax_scale);
          mx = std::max(mx, score.back());
          mag = std::max(mag, m * softmax_scale);
        }
        double z = 0;
        for (double& x : score) z += (x = std::exp(x - mx));
        const double e_score = double(d + 4) * kEps * mag;
        const double n = double(score.size());
        const double e16 = nq >= 8 ? u16 * (4 * mag + 3) : 0.0;
        for (int64_t j = 0; j < d; ++j) {
          double o = 0, vmax = 0;
          for (int64_t p = lo; p <= pos; ++p) {
            const float vj = a.v_val[s][p * row + kvh * d + j];
            o += score[p - lo] * vj;
            vmax = std::max(vmax, std::fabs(double(vj)));
          }
          const int64_t idx = (token * a.num_heads + h) * d + j;
          ref[idx] = o / z;
          tol[idx] = (4 * e_score + (n + 8) * kEps + e16) * vmax + 1e-30;
        }
      }
    }
  }
}

// 2^-8 on CUDA (FlashInfer's 16-bit prefill where the device runs it), 0 elsewhere.
double prefill_u16(const Backend& be) { return be.name().rfind("cuda", 0) == 0 ? 1.0 / 256 : 0; }

struct AttentionConfig {
  int64_t num_heads, kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  std::vector<int64_t> windows;
};

// Varlen batches: a first decode step, decodes mid-block, a whole prefill, a chunked prefill
// ending mid-block, a long context (> 256: the CPU's flash-decoding partitions); GQA (3 query
// heads per KV head), MQA, MHA; head dims 36, 64 and 144 (past the AVX-512 kernel's 128); block
// sizes 16 and 5; windows 0 (full), 1, 7, one block, and one longer than every sequence.
// The last two have FlashInfer's shapes (CUDA decode rows on sm_90: head_dim 64 / 128, groups
// 4 and 8), contexts of several 512-token chunks, windows across chunks and decode rows
// between prefills (rows of a request are not its index).
const std::vector<AttentionConfig>& attention_configs() {
  static const std::vector<AttentionConfig> configs = {
      {6, 2, 36, 16, {{1, 1}, {37, 1}, {20, 20}, {50, 13}, {300, 2}}, {0, 1, 7, 16, 1000}},
      {4, 1, 64, 5, {{9, 3}, {1, 1}, {23, 23}, {18, 1}}, {0, 4}},
      {2, 2, 144, 16, {{33, 2}, {17, 17}}, {0, 9}},
      {16, 2, 128, 16, {{1100, 1}, {30, 30}, {600, 3}, {1, 1}, {513, 1}}, {0, 16, 700}},
  };
  return configs;
}

// The configs [first, last) of attention_configs() against the float64 reference.
void check_attention_configs(Backend& be, size_t first, size_t last) {
  std::mt19937 rng(12);
  for (size_t i = first; i < last; ++i) {
    const AttentionConfig& c = attention_configs()[i];
    for (DType dtype : kKVDTypes) {
      const AttentionSetup a =
          make_attention(be, rng, c.num_heads, c.kv_heads, c.head_dim, c.block_size, dtype, c.seqs);
      const float softmax_scale = 1.0f / std::sqrt(float(c.head_dim));
      for (int64_t window : c.windows) {
        CAPTURE(c.num_heads, c.kv_heads, c.head_dim, c.block_size, dtype_name(dtype), window);
        const std::vector<float> got = run_attention(
            be, a, 0, static_cast<int64_t>(a.seqs.size()), window, softmax_scale);
        std::vector<double> ref, tol;
        attention_reference(a, window, softmax_scale, ref, tol, prefill_u16(be));
        check_close(got, ref, tol, "paged_attention");
      }
    }
  }
}
// The small configs (gpu_check runs this case under compute-sanitizer racecheck; the second
// takes FlashInfer's kernels on sm_90), then the long contexts on FlashInfer's shapes.
void paged_attention_case(Backend& be) { check_attention_configs(be, 0, 3); }
BACKEND_TEST_CASE("paged_attention varlen GQA sliding windows every KV dtype",
                  paged_attention_case)
void paged_attention_long_case(Backend& be) { check_attention_configs(be, 3, 4); }
BACKEND_TEST_CASE("paged_attention contexts of several 512-token chunks, GQA 8, head_dim 128",
                  paged_attention_long_case)

// Each sequence run alone is bit-identical to its rows in the whole batch (37 query rows of 5
// sequences, among them a decode row: m = 1 vs m = 37), for every KV dtype and a window.
void paged_attention_batch_invariance_case(Backend& be) {
  std::mt19937 rng(13);
  for (const AttentionConfig& c : {attention_configs()[0], attention_configs()[3]})
  for (DType dtype : kKVDTypes) {
    const AttentionSetup a =
        make_attention(be, rng, c.num_heads, c.kv_heads, c.head_dim, c.block_size, dtype, c.seqs);
    for (int64_t window : {int64_t{0}, int64_t{7}}) {
      CAPTURE(dtype_name(dtype), window);
      const float scale = 1.0f / std::sqrt(float(c.head_dim));
      const int64_t num_seqs = static_cast<int64_t>(a.seqs.size());
      const std::vector<float> all = run_attention(be, a, 0, num_seqs, window, scale);
      const int64_t width = c.num_heads * c.head_dim;
      for (int64_t s = 0; s < num_seqs; ++s) {
        const std::vector<float> alone = run_attention(be, a, s, 1, window, scale);
        const std::vector<float> in_batch(all.begin() + a.query_start_loc[s] * width,
                                          all.begin() + a.query_start_loc[s + 1] * width);
        INFO("sequence " << s);
        check_identical(alone, in_batch, "sequence alone vs in the batch");
      }
    }
  }
}
BACKEND_TEST_CASE("paged_attention is batch invariant", paged_attention_batch_invariance_case)

// The default CUDA backend (FlashInfer's kernels where the device runs them: sm_90) against one
// made with OCTET_ATTENTION_BACKEND=OCTET (octet's own kernels), on FlashInfer's shapes with
// every KV dtype: each output within the sum of the two backends' tolerances against the
// float64 reference (16-bit prefill rows for the first, FP32 for the second); on other GPUs
// both run octet's kernels and agree bit for bit. The variable's other values are refused.
void flashinfer_against_octet_case(Backend& be) {
  std::unique_ptr<Backend> octet_kernels;
  {
    // The variable as it was, restored on every way out (later cases build backends too).
    const char* before = std::getenv("OCTET_ATTENTION_BACKEND");
    struct Restore {
      std::string value;
      bool was_set;
      ~Restore() {
        if (was_set) setenv("OCTET_ATTENTION_BACKEND", value.c_str(), 1);
        else unsetenv("OCTET_ATTENTION_BACKEND");
      }
    } restore{before != nullptr ? before : "", before != nullptr};
    setenv("OCTET_ATTENTION_BACKEND", "OCTET", 1);
    octet_kernels = make_backend("cuda");
    setenv("OCTET_ATTENTION_BACKEND", "SOMETHING", 1);
    CHECK_THROWS_AS(make_backend("cuda"), std::invalid_argument);
  }
  CHECK(octet_kernels->describe().find("FlashInfer") == std::string::npos);
  const bool flashinfer = be.describe().find("FlashInfer") != std::string::npos;
  INFO("default backend: " << be.describe());
  for (const AttentionConfig& c : {attention_configs()[1], attention_configs()[3]}) {
    for (DType dtype : kKVDTypes) {
      std::mt19937 rng_a(31), rng_b(31);
      const AttentionSetup a =
          make_attention(be, rng_a, c.num_heads, c.kv_heads, c.head_dim, c.block_size, dtype,
                         c.seqs);
      const AttentionSetup b = make_attention(*octet_kernels, rng_b, c.num_heads, c.kv_heads,
                                              c.head_dim, c.block_size, dtype, c.seqs);
      const float scale = 1.0f / std::sqrt(float(c.head_dim));
      const int64_t n = static_cast<int64_t>(a.seqs.size());
      for (int64_t window : c.windows) {
        CAPTURE(c.head_dim, c.num_heads, c.kv_heads, dtype_name(dtype), window);
        const std::vector<float> got = run_attention(be, a, 0, n, window, scale);
        const std::vector<float> want = run_attention(*octet_kernels, b, 0, n, window, scale);
        if (!flashinfer) {
          check_identical(got, want, "octet's kernels on both backends");
          continue;
        }
        std::vector<double> ref, tol16, tol32;
        attention_reference(a, window, scale, ref, tol16, prefill_u16(be));
        attention_reference(a, window, scale, ref, tol32, 0.0);
        std::vector<double> want_d(want.begin(), want.end()), tol(tol16.size());
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = tol16[i] + tol32[i];
        check_close(got, want_d, tol, "FlashInfer against octet's kernels");
      }
    }
  }
}
OCTET_BACKEND_CASE_("cuda", "FlashInfer attention agrees with octet's kernels",
                    flashinfer_against_octet_case)

// A backend whose workspace is reserved for one token and one sequence (Backend::
// reserve_workspace: on CUDA, partial states for one row's 4 partitions and a 27-int plan) runs
// a batch of long decode rows, a prefill and a mixed one in many chunks; its output equals an
// unreserved backend's (one chunk) bit for bit, and the reference within tolerance. Fresh
// backends of the device, so the reservation stays out of the other cases.
void reserved_workspace_case(Backend& be) {
  const std::string device = be.name().rfind("cpu", 0) == 0 ? "cpu" : "cuda";
  const std::unique_ptr<Backend> small = make_backend(device), whole = make_backend(device);
  WorkspaceShape shape;
  shape.max_num_batched_tokens = 1;
  shape.max_num_seqs = 1;
  shape.max_model_len = 2048;
  shape.block_size = 16;
  shape.num_heads = 6;
  shape.head_dim = 36;
  const WorkspaceBytes w = small->reserve_workspace(shape);
  CHECK(w.total() == small->workspace_bytes(shape).total());
  INFO("reserved " << w.gemm_scratch << " + " << w.attention_partials << " + "
                   << w.attention_plan << " bytes");
  const std::vector<SeqSpec> seqs = {{1500, 3}, {2000, 1}, {600, 20}, {513, 2}, {37, 1},
                                     {1024, 7}, {1999, 9}};
  for (DType dtype : {DType::BF16, DType::FP8_E4M3}) {
    std::mt19937 rng_a(21), rng_b(21);
    const AttentionSetup a = make_attention(*small, rng_a, 6, 2, 36, 16, dtype, seqs);
    const AttentionSetup b = make_attention(*whole, rng_b, 6, 2, 36, 16, dtype, seqs);
    const float scale = 1.0f / std::sqrt(36.0f);
    const int64_t n = static_cast<int64_t>(seqs.size());
    for (int64_t window : {int64_t{0}, int64_t{700}}) {
      CAPTURE(dtype_name(dtype), window);
      const std::vector<float> chunked = run_attention(*small, a, 0, n, window, scale);
      const std::vector<float> one = run_attention(*whole, b, 0, n, window, scale);
      check_identical(chunked, one, "reserved (chunked) vs unreserved");
      std::vector<double> ref, tol;
      attention_reference(a, window, scale, ref, tol, prefill_u16(be));
      check_close(chunked, ref, tol, "paged_attention in chunks");
    }
  }
}
BACKEND_TEST_CASE("paged_attention in a reserved workspace equals one call",
                  reserved_workspace_case)

// The GEMM half of the same workspace (kept beside the attention case: one reservation): a
// backend reserved for 8 rows of a 64 x 128 FP8 linear in 2 k parts runs linear_w8a8 and
// linear_w8a8_partials on 100 rows in pieces of 8; the outputs equal an unreserved backend's
// (one 100-row call) bit for bit. That needs the GEMM's bits not to depend on m, which the
// Backend contract requires (batch invariance); cuBLASLt eligible shapes (k % 16, n % 4).
void reserved_gemm_case(Backend& be) {
  const std::string device = be.name().rfind("cpu", 0) == 0 ? "cpu" : "cuda";
  const std::unique_ptr<Backend> small = make_backend(device), whole = make_backend(device);
  const int64_t n = 64, k = 128, groups = 2, m = 100;
  WorkspaceShape shape;
  shape.max_num_batched_tokens = 8;
  shape.max_num_seqs = 1;
  shape.fp8_linears = {{n, k, groups}};
  small->reserve_workspace(shape);
  std::mt19937 rng(31);
  // E4M3 codes of values in [-2, 2] (no NaN codes), per-row weight and activation scales.
  const auto codes = [&](int64_t count) {
    std::vector<uint8_t> c(static_cast<size_t>(count));
    const std::vector<float> v = uniform(rng, count, -2.0f, 2.0f);
    for (int64_t i = 0; i < count; ++i) c[i] = ref_fp8(DType::FP8_E4M3, v[i]);
    return c;
  };
  const std::vector<uint8_t> wq = codes(n * k), qa = codes(m * k);
  const std::vector<float> w_scale = uniform(rng, n, 0.01f, 0.02f);
  const std::vector<float> a_scale = uniform(rng, m, 0.005f, 0.05f);
  const std::vector<float> bias = uniform(rng, n, -1.0f, 1.0f);
  std::vector<std::vector<float>> y, acc;
  for (Backend* b : {small.get(), whole.get()}) {
    const auto d_w = to_device(*b, wq), d_qa = to_device(*b, qa);
    const auto d_ws = to_device(*b, w_scale), d_as = to_device(*b, a_scale);
    const auto d_bias = to_device(*b, bias);
    WeightRef w;
    w.data = d_w.data();
    w.dtype = DType::FP8_E4M3;
    w.n = n;
    w.k = k;
    w.scale = d_ws.data();
    w.bias = d_bias.data();
    w.k_groups = groups;
    auto d_y = device_zeros<float>(*b, m * n), d_acc = device_zeros<float>(*b, groups * m * n);
    b->linear_w8a8(d_qa.data(), d_as.data(), ScaleGranularity::PerRow, m, w, d_y.data());
    b->linear_w8a8_partials(d_qa.data(), m, w, d_acc.data());
    y.push_back(to_host(*b, d_y));
    acc.push_back(to_host(*b, d_acc));
  }
  check_identical(y[0], y[1], "linear_w8a8 in pieces vs one call");
  check_identical(acc[0], acc[1], "linear_w8a8_partials in pieces vs one call");
}
BACKEND_TEST_CASE("linear_w8a8 in a reserved workspace equals one call", reserved_gemm_case)

}  // namespace
