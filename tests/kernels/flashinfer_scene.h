// The scenes test_flashinfer_plan.cpp and test_flashinfer_rows.cpp run FlashInfer's plans
// (kernels/cuda/flashinfer_plan.h) on: one layer's cache holding varlen sequences at shuffled
// pages, their queries and batches, octet's CPU attention over them, and the comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/common/fp8.h"
#include "kernels/common/half.h"
#include "kernels/cuda/flashinfer_plan.h"

namespace octet_test::flashinfer {

using namespace octet;
using namespace octet::cuda_kernels;


inline Backend& cpu_backend() {
  static std::unique_ptr<Backend> be = make_backend("cpu");
  Catch::StringMaker<float>::precision = 9;  // failures print errors and bounds legibly
  return *be;
}

// A sequence of a batch: context length after this step and query count.
struct SeqSpec {
  int64_t seq_len, num_queries;
};

// Attention shapes of one scene.
struct Shape {
  int64_t block_size, num_heads, num_kv_heads, head_dim;
};

// One layer's cache holding the scene's sequences at shuffled pages, their queries, and the
// batches made of them. K, V, q ~ N(0, 1).
struct Scene {
  DType dtype;
  Shape shape;
  int64_t num_blocks = 0, max_blocks = 0;
  std::vector<uint8_t> k, v;                 // [num_blocks, block_size, kv heads, head_dim]
  std::vector<float> k_scale, v_scale;       // [kv heads], FP8 only
  std::vector<SeqSpec> seqs;
  std::vector<std::vector<int32_t>> tables;  // per sequence, max_blocks entries (-1: unused)
  std::vector<std::vector<float>> queries;   // per sequence, [num_queries, heads, head_dim]
  std::vector<std::vector<float>> k_f32, v_f32;  // per sequence, [seq_len, kv heads, head_dim]

  Scene(DType dtype_, Shape sh, std::vector<SeqSpec> specs, uint32_t seed)
      : dtype(dtype_), shape(sh), seqs(std::move(specs)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    const int64_t bs = sh.block_size, row = sh.num_kv_heads * sh.head_dim;
    for (const SeqSpec& s : seqs) {
      num_blocks += (s.seq_len + bs - 1) / bs;
      max_blocks = std::max(max_blocks, (s.seq_len + bs - 1) / bs);
    }
    num_blocks += 3;
    k.assign(static_cast<size_t>(num_blocks * bs * row * dtype_bytes(dtype)), 0);
    v.assign(k.size(), 0);
    if (dtype_is_fp8(dtype))
      for (int64_t h = 0; h < sh.num_kv_heads; ++h) {  // distinct, |x| <= 6 stays below 448 s
        k_scale.push_back(static_cast<float>(1 + h) / 64);
        v_scale.push_back(static_cast<float>(3 + 2 * h) / 128);
      }
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (const SeqSpec& s : seqs) {
      std::vector<int32_t> table(static_cast<size_t>(max_blocks), -1);
      for (int64_t b = 0; b < (s.seq_len + bs - 1) / bs; ++b) table[b] = ids[next++];
      std::vector<float> kk(static_cast<size_t>(s.seq_len * row)), vv(kk.size());
      for (size_t i = 0; i < kk.size(); ++i) kk[i] = nd(rng), vv[i] = nd(rng);
      std::vector<int64_t> slots;
      for (int64_t p = 0; p < s.seq_len; ++p) slots.push_back(table[p / bs] * bs + p % bs);
      cpu_backend().write_kv_cache(view(), kk.data(), vv.data(), slots.data(), s.seq_len);
      std::vector<float> q(static_cast<size_t>(s.num_queries * sh.num_heads * sh.head_dim));
      for (float& x : q) x = nd(rng);
      tables.push_back(std::move(table));
      queries.push_back(std::move(q));
      k_f32.push_back(std::move(kk));
      v_f32.push_back(std::move(vv));
    }
  }

  KVCacheView view() const {
    KVCacheView c;
    c.k = const_cast<uint8_t*>(k.data());
    c.v = const_cast<uint8_t*>(v.data());
    c.dtype = dtype;
    c.num_blocks = num_blocks;
    c.block_size = shape.block_size;
    c.num_kv_heads = shape.num_kv_heads;
    c.head_dim = shape.head_dim;
    c.k_scale = k_scale.empty() ? nullptr : k_scale.data();
    c.v_scale = v_scale.empty() ? nullptr : v_scale.data();
    return c;
  }

  // The batch of sequences `order` (indices into seqs), in that order.
  struct Batch {
    std::vector<int64_t> qsl{0}, lens;
    std::vector<int32_t> tables;
    std::vector<float> q;
    int64_t max_blocks = 0;
    PagedAttentionBatch view() const {
      PagedAttentionBatch b;
      b.num_seqs = static_cast<int64_t>(lens.size());
      b.query_start_loc = qsl.data();
      b.seq_lens = lens.data();
      b.block_tables = tables.data();
      b.max_blocks_per_seq = max_blocks;
      return b;
    }
    int64_t num_rows() const { return qsl.back(); }
  };
  Batch batch(const std::vector<int>& order) const {
    Batch b;
    b.max_blocks = max_blocks;
    for (int i : order) {
      b.qsl.push_back(b.qsl.back() + seqs[i].num_queries);
      b.lens.push_back(seqs[i].seq_len);
      b.tables.insert(b.tables.end(), tables[i].begin(), tables[i].end());
      b.q.insert(b.q.end(), queries[i].begin(), queries[i].end());
    }
    return b;
  }
  std::vector<int> all() const {
    std::vector<int> o(seqs.size());
    std::iota(o.begin(), o.end(), 0);
    return o;
  }

  FlashInferPlanInput plan_input(const Batch& b, int64_t window, int64_t chunk_tokens) const {
    FlashInferPlanInput in;
    in.num_seqs = static_cast<int64_t>(b.lens.size());
    in.query_start_loc = b.qsl.data();
    in.seq_lens = b.lens.data();
    in.block_tables = b.tables.data();
    in.max_blocks_per_seq = b.max_blocks;
    in.block_size = shape.block_size;
    in.num_blocks = num_blocks;
    in.sliding_window = window;
    in.kv_chunk_tokens = chunk_tokens;
    return in;
  }

  // max |V| as the kernels read it (dequantized), over the used slots.
  float vmax() const {
    const KVCacheView c = view();
    const int64_t bs = shape.block_size, row = shape.num_kv_heads * shape.head_dim;
    float m = 0;
    for (size_t s = 0; s < seqs.size(); ++s)
      for (int64_t p = 0; p < seqs[s].seq_len; ++p) {
        const int64_t slot = tables[s][p / bs] * bs + p % bs;
        for (int64_t i = 0; i < row; ++i) {
          const float scale = dtype_is_fp8(dtype) ? v_scale[i / shape.head_dim] : 1.0f;
          m = std::max(m, std::fabs(raw_element(c, c.v, slot * row + i) * scale));
        }
      }
    return m;
  }

  // The cache element `e` of k or v as stored: 16-bit values widened, FP8 codes unscaled.
  static float raw_element(const KVCacheView& c, const void* base, int64_t e) {
    const auto* bytes = static_cast<const uint8_t*>(base);
    uint16_t h;
    switch (c.dtype) {
      case DType::F32: {
        float f;
        std::memcpy(&f, bytes + 4 * e, 4);
        return f;
      }
      case DType::BF16: std::memcpy(&h, bytes + 2 * e, 2); return bf16_to_float(h);
      case DType::F16: std::memcpy(&h, bytes + 2 * e, 2); return fp16_to_float(h);
      case DType::FP8_E4M3: return fp8_e4m3_to_float(bytes[e]);
      case DType::FP8_E5M2: return fp8_e5m2_to_float(bytes[e]);
    }
    return 0;
  }
};

inline std::vector<float> cpu_attention(const Scene& sc, const Scene::Batch& b, int64_t window,
                                 float softmax_scale) {
  std::vector<float> out(b.q.size(), -7.0f);
  cpu_backend().paged_attention(sc.view(), b.q.data(), b.view(), sc.shape.num_heads, window,
                                softmax_scale, out.data());
  return out;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<float>::infinity();
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? std::numeric_limits<float>::infinity() : d;
  }
  return m;
}

template <typename T>
std::vector<int64_t> as_i64(const std::vector<T>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

/// An executor's result: the output rows and what in the plan a kernel could not follow.
struct Executed {
  std::vector<float> out;  // [rows, heads, head_dim]; rows no merge wrote keep -7
  std::string problems;    // what in the plan a kernel could not follow; empty: none
};

}  // namespace octet_test::flashinfer
