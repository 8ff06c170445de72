// FlashInfer's paged-attention plan (kernels/cuda/flashinfer_plan.h), without a GPU: exact plans
// of small batches; then a CPU executor that computes attention from the plan alone, as
// FlashInfer's kernels read it (pages through kv_indptr / kv_indices / kv_last_page_len, the
// causal and sliding-window masks in kept coordinates, one (output, log-sum-exp) state per
// (row, head, chunk) at o_indptr, merged in chunk order through merge_indptr), against octet's
// CPU attention (make_backend("cpu")) on varlen decode + prefill batches, GQA / MQA, sliding
// windows, contexts of several chunks and graph-padded plans; the plan of a sequence whatever
// shares its batch; k_scale / v_scale folded into q and the output against explicit
// dequantization.
//
// Tolerance against the CPU attention: both read the same dequantized K/V in FP32; only the
// summation orders (q.k dots, softmax sums, the weighted V sum, the chunk merge against the CPU's
// 256-position partition fold) and exp / log roundings differ, a few ulp on each score and
// weight. Outputs are convex combinations of V, so they agree to 1e-5 x max|V| + 1e-6 (the bound
// of test_paged_attention.cpp). A planning error moves them much more: one key too many or too
// few among n changes an output by about its weight, ~max|V| / n >= 5e-4 x max|V| here
// (n <= 1300, scores ~N(0, 1)).
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
#include "kernels/cuda/flashinfer_layout.h"
#include "kernels/cuda/flashinfer_plan.h"

using namespace octet;
using namespace octet::cuda_kernels;

namespace {

Backend& cpu_backend() {
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

// ---- The executor: attention from the plan alone ---------------------------------------------

struct Executed {
  std::vector<float> out;  // [rows, heads, head_dim]; rows no merge wrote keep -7
  std::string problems;    // what in the plan a kernel could not follow; empty: none
};

// FlashInfer's reading of `p` over cache c: per valid work item (request r, chunk c), for each
// of r's rows j and heads h, the keys of kept tokens [c C, min((c+1) C, kv_len)) that pass
// FlashInfer's masks (causal: t <= kv_len - qo_len + j; window: t + qo_len + window_left >=
// kv_len + j), kv_len derived from the pages and kv_last_page_len; its normalised output and
// log-sum-exp go to state o_indptr[r] + j * chunks + c; each row then merges its states
// [merge_indptr[row], merge_indptr[row + 1]) in order (an empty state, lse -inf, adds nothing).
// FP8: k_scale folded into q (q_h k_scale[kv head of h]) and v_scale into the output, per head;
// the cache is read as raw codes. Everything in FP32.
Executed execute_plan(const FlashInferPlan& p, const KVCacheView& c, const float* q,
                      int64_t num_rows, int64_t num_heads, float softmax_scale) {
  Executed x;
  std::ostringstream err;
  const int64_t hd = c.head_dim, nkv = c.num_kv_heads, group = num_heads / nkv;
  const int64_t bs = p.block_size, C = p.kv_chunk_tokens, row_elems = nkv * hd;
  const bool fp8 = dtype_is_fp8(c.dtype);
  const int64_t states = p.num_partial_states();
  std::vector<float> so(static_cast<size_t>(states * num_heads * hd), 0.0f);
  std::vector<float> slse(static_cast<size_t>(states * num_heads),
                          -std::numeric_limits<float>::infinity());
  std::vector<int> written(static_cast<size_t>(states), 0);
  std::vector<float> qs(static_cast<size_t>(hd)), scores, acc(static_cast<size_t>(hd));

  for (int64_t w = 0; w < p.num_items(); ++w) {
    if (!p.item_valid[w]) continue;
    const int64_t r = p.request_indices[w], ck = p.kv_tile_indices[w];
    if (r < 0 || r >= p.num_requests() || !p.request_valid[r]) {
      err << "item " << w << " names request " << r << " (absent or invalid); ";
      continue;
    }
    const int64_t qo0 = p.qo_indptr[r], qo_len = p.qo_indptr[r + 1] - qo0;
    const int64_t pg0 = p.kv_indptr[r], pages = p.kv_indptr[r + 1] - pg0;
    const int64_t last = p.kv_last_page_len[r];
    if (pages < 1 || last < 1 || last > bs) {
      err << "request " << r << ": " << pages << " pages, last page " << last << "; ";
      continue;
    }
    const int64_t kv_len = (pages - 1) * bs + last;
    const int64_t chunks = (kv_len + C - 1) / C;
    if (ck < 0 || ck >= chunks) {
      err << "item " << w << ": chunk " << ck << " of " << chunks << "; ";
      continue;
    }
    const int64_t t0 = ck * C, t1 = std::min(kv_len, t0 + C);
    for (int64_t j = 0; j < qo_len; ++j) {
      const int64_t slot = p.o_indptr[r] + j * chunks + ck;
      if (slot < 0 || slot >= states || written[slot]++) {
        err << "request " << r << " row " << j << " chunk " << ck << ": state " << slot
            << " outside or written twice; ";
        continue;
      }
      for (int64_t h = 0; h < num_heads; ++h) {
        const int64_t kvh = h / group;
        const float fold_k = fp8 ? c.k_scale[kvh] : 1.0f;
        const float* qh = q + ((qo0 + j) * num_heads + h) * hd;
        for (int64_t d = 0; d < hd; ++d) qs[d] = qh[d] * fold_k;
        scores.clear();
        std::vector<int64_t> kept;
        for (int64_t t = t0; t < t1; ++t) {
          if (t > kv_len - qo_len + j) continue;
          if (p.window_left >= 0 && t + qo_len + p.window_left < kv_len + j) continue;
          const int64_t page = p.kv_indices[pg0 + t / bs];
          if (page < 0 || page >= c.num_blocks) {
            err << "request " << r << ": page id " << page << "; ";
            continue;
          }
          const int64_t base = (page * bs + t % bs) * row_elems + kvh * hd;
          float dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += qs[d] * Scene::raw_element(c, c.k, base + d);
          scores.push_back(dot * softmax_scale);
          kept.push_back(base);
        }
        if (scores.empty()) continue;  // empty state: lse stays -inf
        const float m = *std::max_element(scores.begin(), scores.end());
        float l = 0;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (size_t i = 0; i < scores.size(); ++i) {
          const float e = std::exp(scores[i] - m);
          l += e;
          for (int64_t d = 0; d < hd; ++d) acc[d] += e * Scene::raw_element(c, c.v, kept[i] + d);
        }
        float* o = &so[(slot * num_heads + h) * hd];
        for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] / l;
        slse[slot * num_heads + h] = m + std::log(l);
      }
    }
  }

  x.out.assign(static_cast<size_t>(num_rows * num_heads * hd), -7.0f);
  if (p.num_rows() != num_rows) err << "plan has " << p.num_rows() << " rows, batch " << num_rows;
  for (int64_t row = 0; row < std::min(num_rows, p.num_rows()); ++row) {
    for (int64_t h = 0; h < num_heads; ++h) {
      std::vector<float> o(static_cast<size_t>(hd), 0.0f);
      float lse = -std::numeric_limits<float>::infinity();
      for (int64_t s = p.merge_indptr[row]; s < p.merge_indptr[row + 1]; ++s) {
        if (s < 0 || s >= states || !written[s]) {
          err << "row " << row << ": state " << s << " never written; ";
          break;
        }
        const float b = slse[s * num_heads + h];
        if (b == -std::numeric_limits<float>::infinity()) continue;
        const float* ob = &so[(s * num_heads + h) * hd];
        if (lse == -std::numeric_limits<float>::infinity()) {
          std::copy(ob, ob + hd, o.begin());
          lse = b;
          continue;
        }
        const float mx = std::max(lse, b), wa = std::exp(lse - mx), wb = std::exp(b - mx);
        for (int64_t d = 0; d < hd; ++d) o[d] = (o[d] * wa + ob[d] * wb) / (wa + wb);
        lse = mx + std::log(wa + wb);
      }
      if (lse == -std::numeric_limits<float>::infinity()) {
        err << "row " << row << " head " << h << " sees no key; ";
        continue;
      }
      const float fold_v = fp8 ? c.v_scale[h / group] : 1.0f;
      for (int64_t d = 0; d < hd; ++d) x.out[(row * num_heads + h) * hd + d] = o[d] * fold_v;
    }
  }
  x.problems = err.str();
  return x;
}

// ---- Structure: what each row sees, in absolute positions ---------------------------------------

// Checks p against octet's rule on batch b: requests cover the rows in order, one per decode
// row or per prefill sequence; kept pages are the sequence's pages from the page holding the
// first query's window start to the last position, kv_start is that page's first position,
// and FlashInfer's masks leave each row exactly max(0, pos - window + 1) .. pos. Returns what
// disagrees (empty: nothing).
std::string structure_problems(const FlashInferPlan& p, const Scene::Batch& b, int64_t window) {
  std::ostringstream err;
  const int64_t bs = p.block_size;
  if (p.qo_indptr.front() != 0 || p.qo_indptr.back() != b.num_rows())
    err << "qo_indptr does not cover the rows; ";
  for (int64_t r = 0; r < p.num_requests(); ++r) {
    if (!p.request_valid[r]) continue;
    const int64_t s = p.seq[r], qo0 = p.qo_indptr[r], qo_len = p.qo_indptr[r + 1] - qo0;
    const int64_t nq = b.qsl[s + 1] - b.qsl[s], len = b.lens[s];
    const int64_t kv_len = p.kv_len[r], start = p.kv_start[r];
    const int64_t pages = p.kv_indptr[r + 1] - p.kv_indptr[r];
    if ((nq >= kFlashInferPrefillMinQueries) != (p.is_prefill[r] == 1) ||
        (p.is_prefill[r] ? qo_len != nq : qo_len != 1))
      err << "request " << r << ": kind or row count; ";
    if (qo0 < b.qsl[s] || qo0 + qo_len > b.qsl[s + 1]) err << "request " << r << ": rows; ";
    if (kv_len != (pages - 1) * bs + p.kv_last_page_len[r])
      err << "request " << r << ": kv_len != pages and last page; ";
    if (p.num_chunks[r] != (kv_len + p.kv_chunk_tokens - 1) / p.kv_chunk_tokens)
      err << "request " << r << ": num_chunks; ";
    const int64_t first_pos = len - nq + (qo0 - b.qsl[s]);
    const int64_t first_lo = window > 0 ? std::max<int64_t>(0, first_pos - window + 1) : 0;
    if (start != first_lo / bs * bs) err << "request " << r << ": kv_start " << start << "; ";
    if (start + kv_len != first_pos + qo_len) err << "request " << r << ": KV end; ";
    const int32_t* table = b.tables.data() + s * b.max_blocks;
    for (int64_t i = 0; i < pages; ++i)
      if (p.kv_indices[p.kv_indptr[r] + i] != table[start / bs + i])
        err << "request " << r << ": page " << i << "; ";
    for (int64_t j = 0; j < qo_len; ++j) {
      const int64_t pos = first_pos + j;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      int64_t seen_lo = -1, seen_hi = -1, count = 0;
      for (int64_t t = 0; t < kv_len; ++t) {
        if (t > kv_len - qo_len + j) continue;
        if (p.window_left >= 0 && t + qo_len + p.window_left < kv_len + j) continue;
        if (seen_lo < 0) seen_lo = start + t;
        seen_hi = start + t;
        ++count;
      }
      if (seen_lo != lo || seen_hi != pos || count != pos - lo + 1)
        err << "request " << r << " row " << j << " sees " << seen_lo << ".." << seen_hi
            << ", octet " << lo << ".." << pos << "; ";
    }
  }
  return err.str();
}

std::vector<float> cpu_attention(const Scene& sc, const Scene::Batch& b, int64_t window,
                                 float softmax_scale) {
  std::vector<float> out(b.q.size(), -7.0f);
  cpu_backend().paged_attention(sc.view(), b.q.data(), b.view(), sc.shape.num_heads, window,
                                softmax_scale, out.data());
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<float>::infinity();
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? std::numeric_limits<float>::infinity() : d;
  }
  return m;
}

// One sequence's share of a plan, in request-relative terms: per request, its kind, rows,
// KV (start, length, last page, pages), chunks, its items' chunks and its state offsets.
std::vector<std::vector<int64_t>> seq_view(const FlashInferPlan& p, int64_t s) {
  std::vector<std::vector<int64_t>> v;
  for (int64_t r = 0; r < p.num_requests(); ++r) {
    if (p.seq[r] != s) continue;
    std::vector<int64_t> e{p.is_prefill[r], p.qo_indptr[r + 1] - p.qo_indptr[r], p.kv_start[r],
                           p.kv_len[r], p.kv_last_page_len[r], p.num_chunks[r],
                           p.o_indptr[r + 1] - p.o_indptr[r]};
    e.insert(e.end(), p.kv_indices.begin() + p.kv_indptr[r],
             p.kv_indices.begin() + p.kv_indptr[r + 1]);
    e.push_back(-1);
    for (int64_t w = 0; w < p.num_items(); ++w)
      if (p.request_indices[w] == r) e.push_back(p.kv_tile_indices[w]);
    e.push_back(-1);
    for (int64_t row = p.qo_indptr[r]; row <= p.qo_indptr[r + 1]; ++row)
      e.push_back(p.merge_indptr[row] - p.o_indptr[r]);
    v.push_back(std::move(e));
  }
  return v;
}

template <typename T>
std::vector<int64_t> as_i64(const std::vector<T>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

// FlashInfer's decode kernel and octet's merge (flashinfer_decode.h) reading a row-indexed
// decode plan `d` of chunk size C over the flattened block table `tables`: per valid item w
// (row r = request_indices[w], chunk c), the query of row r against r's kept tokens
// [c C, min((c+1) C, kv_len[r])), token t in page tables[page_start[r] + t / bs], within the
// window (t + 1 + window_left >= kv_len), logits times k_scale of the KV head, then
// softmax_scale; the normalised output and the log-sum-exp go to slot w. Row r's output merges
// slots [o_indptr[r], o_indptr[r+1]) and takes v_scale; rows without items keep -7.
Executed execute_decode_rows(const FlashInferDecodeRows& d, const std::vector<int32_t>& tables,
                             int64_t C, int64_t window_left, const KVCacheView& c,
                             const float* q, int64_t num_heads, float softmax_scale) {
  Executed x;
  std::ostringstream err;
  const int64_t hd = c.head_dim, nkv = c.num_kv_heads, group = num_heads / nkv;
  const int64_t bs = c.block_size, rows = d.rows(), W = d.num_items();
  const bool fp8 = dtype_is_fp8(c.dtype);
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> so(static_cast<size_t>(W * num_heads * hd), 0.0f);
  std::vector<float> slse(static_cast<size_t>(W * num_heads), ninf);
  if (d.page_start[rows] != static_cast<int32_t>(tables.size()))
    err << "page_start[rows] " << d.page_start[rows] << ", table " << tables.size() << "; ";
  for (int64_t w = 0; w < W; ++w) {
    if (!d.item_valid[w]) continue;
    const int64_t r = d.request_indices[w], ck = d.kv_tile_indices[w];
    const int64_t kv_len = d.kv_len[r], pg0 = d.page_start[r];
    const int64_t t0 = ck * C, t1 = std::min(kv_len, t0 + C);
    if (t0 >= kv_len) err << "item " << w << ": chunk " << ck << " past kv_len " << kv_len << "; ";
    if (pg0 + (kv_len + bs - 1) / bs > d.page_start[rows])
      err << "row " << r << ": pages past the table; ";
    const int64_t wl = window_left >= 0 ? window_left : kv_len;
    for (int64_t h = 0; h < num_heads; ++h) {
      const int64_t kvh = h / group;
      const float* qh = q + (r * num_heads + h) * hd;
      std::vector<float> scores;
      std::vector<int64_t> kept;
      for (int64_t t = t0; t < t1; ++t) {
        if (t + 1 + wl < kv_len) continue;
        const int64_t page = tables[static_cast<size_t>(pg0 + t / bs)];
        if (page < 0 || page >= c.num_blocks) {
          err << "row " << r << ": page id " << page << "; ";
          continue;
        }
        const int64_t base = (page * bs + t % bs) * nkv * hd + kvh * hd;
        float dot = 0;
        for (int64_t e = 0; e < hd; ++e) dot += qh[e] * Scene::raw_element(c, c.k, base + e);
        scores.push_back(dot * (fp8 ? c.k_scale[kvh] : 1.0f) * softmax_scale);
        kept.push_back(base);
      }
      if (scores.empty()) continue;
      const float m = *std::max_element(scores.begin(), scores.end());
      float l = 0;
      std::vector<float> acc(static_cast<size_t>(hd), 0.0f);
      for (size_t i = 0; i < scores.size(); ++i) {
        const float e = std::exp(scores[i] - m);
        l += e;
        for (int64_t j = 0; j < hd; ++j) acc[j] += e * Scene::raw_element(c, c.v, kept[i] + j);
      }
      for (int64_t j = 0; j < hd; ++j) so[(w * num_heads + h) * hd + j] = acc[j] / l;
      slse[w * num_heads + h] = m + std::log(l);
    }
  }
  x.out.assign(static_cast<size_t>(rows * num_heads * hd), -7.0f);
  for (int64_t r = 0; r < rows; ++r) {
    if (d.o_indptr[r] == d.o_indptr[r + 1]) continue;
    for (int64_t h = 0; h < num_heads; ++h) {
      float m = ninf;
      for (int64_t w = d.o_indptr[r]; w < d.o_indptr[r + 1]; ++w) {
        if (!d.item_valid[w] || d.request_indices[w] != r)
          err << "row " << r << ": slot " << w << " is not its item; ";
        m = std::max(m, slse[w * num_heads + h]);
      }
      float sum = 0;
      std::vector<float> acc(static_cast<size_t>(hd), 0.0f);
      for (int64_t w = d.o_indptr[r]; w < d.o_indptr[r + 1]; ++w) {
        if (slse[w * num_heads + h] == ninf) continue;
        const float wt = std::exp(slse[w * num_heads + h] - m);
        sum += wt;
        for (int64_t j = 0; j < hd; ++j) acc[j] += wt * so[(w * num_heads + h) * hd + j];
      }
      const float vs = fp8 ? c.v_scale[h / group] : 1.0f;
      for (int64_t j = 0; j < hd; ++j)
        x.out[(r * num_heads + h) * hd + j] = sum > 0 ? acc[j] / sum * vs : 0.0f;
    }
  }
  x.problems = err.str();
  return x;
}

}  // namespace

// ---- Exact plans --------------------------------------------------------------------------------

TEST_CASE("flashinfer plan of a small mixed batch is exact", "[flashinfer_plan]") {
  // block_size 4, chunks of 8 tokens. A: 6 tokens, 2 queries (decode rows at positions 4, 5);
  // B: 10 tokens, 8 queries (prefill, positions 2..9); C: 3 tokens, 1 query.
  const std::vector<int64_t> qsl{0, 2, 10, 11}, lens{6, 10, 3};
  const std::vector<int32_t> tables{7, 2, -1,  0, 5, 9,  4, -1, -1};
  FlashInferPlanInput in;
  in.num_seqs = 3;
  in.query_start_loc = qsl.data();
  in.seq_lens = lens.data();
  in.block_tables = tables.data();
  in.max_blocks_per_seq = 3;
  in.block_size = 4;
  in.num_blocks = 10;
  in.kv_chunk_tokens = 8;

  SECTION("full attention") {
    const FlashInferPlan p = make_flashinfer_plan(in);
    CHECK(p.window_left == -1);
    CHECK(as_i64(p.qo_indptr) == std::vector<int64_t>{0, 1, 2, 10, 11});
    CHECK(as_i64(p.kv_indptr) == std::vector<int64_t>{0, 2, 4, 7, 8});
    CHECK(as_i64(p.kv_indices) == std::vector<int64_t>{7, 2, 7, 2, 0, 5, 9, 4});
    CHECK(as_i64(p.kv_last_page_len) == std::vector<int64_t>{1, 2, 2, 3});
    CHECK(as_i64(p.kv_len) == std::vector<int64_t>{5, 6, 10, 3});
    CHECK(as_i64(p.kv_start) == std::vector<int64_t>{0, 0, 0, 0});
    CHECK(as_i64(p.seq) == std::vector<int64_t>{0, 0, 1, 2});
    CHECK(as_i64(p.is_prefill) == std::vector<int64_t>{0, 0, 1, 0});
    CHECK(as_i64(p.num_chunks) == std::vector<int64_t>{1, 1, 2, 1});
    CHECK(as_i64(p.request_indices) == std::vector<int64_t>{0, 1, 2, 2, 3});
    CHECK(as_i64(p.kv_tile_indices) == std::vector<int64_t>{0, 0, 0, 1, 0});
    CHECK(as_i64(p.o_indptr) == std::vector<int64_t>{0, 1, 2, 18, 19});
    CHECK(as_i64(p.merge_indptr) ==
          std::vector<int64_t>{0, 1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 19});
    CHECK(p.num_partial_states() == 19);
  }
  SECTION("window of 2 drops the pages before it") {
    in.sliding_window = 2;
    const FlashInferPlan p = make_flashinfer_plan(in);
    CHECK(p.window_left == 1);
    // A's row at 4 sees 3..4 (pages 0, 1); at 5 sees 4..5 (page 1 only); B's first query (2)
    // sees 1..2 (page 0: nothing dropped); C's query (2) sees 1..2.
    CHECK(as_i64(p.kv_indptr) == std::vector<int64_t>{0, 2, 3, 6, 7});
    CHECK(as_i64(p.kv_indices) == std::vector<int64_t>{7, 2, 2, 0, 5, 9, 4});
    CHECK(as_i64(p.kv_last_page_len) == std::vector<int64_t>{1, 2, 2, 3});
    CHECK(as_i64(p.kv_len) == std::vector<int64_t>{5, 2, 10, 3});
    CHECK(as_i64(p.kv_start) == std::vector<int64_t>{0, 4, 0, 0});
    CHECK(as_i64(p.num_chunks) == std::vector<int64_t>{1, 1, 2, 1});
  }
  SECTION("a prefill whose window starts mid-sequence") {
    // One sequence of 20 tokens, 8 queries (positions 12..19), window 5: the first query sees
    // 8..12, so pages 0 and 1 go; the kept 12 tokens (8..19) make two chunks.
    const std::vector<int64_t> qsl1{0, 8}, lens1{20};
    const std::vector<int32_t> table1{11, 12, 13, 14, 15};
    FlashInferPlanInput one = in;
    one.num_seqs = 1;
    one.query_start_loc = qsl1.data();
    one.seq_lens = lens1.data();
    one.block_tables = table1.data();
    one.max_blocks_per_seq = 5;
    one.num_blocks = 16;
    one.sliding_window = 5;
    const FlashInferPlan p = make_flashinfer_plan(one);
    CHECK(as_i64(p.kv_indices) == std::vector<int64_t>{13, 14, 15});
    CHECK(as_i64(p.kv_last_page_len) == std::vector<int64_t>{4});
    CHECK(as_i64(p.kv_len) == std::vector<int64_t>{12});
    CHECK(as_i64(p.kv_start) == std::vector<int64_t>{8});
    CHECK(as_i64(p.kv_tile_indices) == std::vector<int64_t>{0, 1});
    CHECK(as_i64(p.o_indptr) == std::vector<int64_t>{0, 16});
  }
}

TEST_CASE("flashinfer plan rejects inconsistent batches", "[flashinfer_plan]") {
  std::vector<int64_t> qsl{0, 2, 3}, lens{6, 3};
  std::vector<int32_t> tables{7, 2, 4, -1};
  FlashInferPlanInput in;
  in.num_seqs = 2;
  in.query_start_loc = qsl.data();
  in.seq_lens = lens.data();
  in.block_tables = tables.data();
  in.max_blocks_per_seq = 2;
  in.block_size = 4;
  in.num_blocks = 8;
  in.kv_chunk_tokens = 8;
  REQUIRE_NOTHROW(make_flashinfer_plan(in));
  using Catch::Matchers::Contains;

  SECTION("fewer tokens than queries") {
    lens[1] = 0;
    CHECK_THROWS_WITH(make_flashinfer_plan(in), Contains("seq_len 0 < its 1 queries"));
  }
  SECTION("a negative block id in a kept page") {
    tables[1] = -1;
    CHECK_THROWS_WITH(make_flashinfer_plan(in), Contains("block_tables[0, 1] = -1"));
  }
  SECTION("a block id beyond the cache") {
    tables[2] = 8;
    CHECK_THROWS_AS(make_flashinfer_plan(in), std::invalid_argument);
  }
  SECTION("a negative block id in a page the window drops is fine") {
    in.sliding_window = 2;  // A's rows at 4 and 5 see 3..5 at most: page 0 is needed by row 4
    tables[0] = -1;
    CHECK_THROWS_AS(make_flashinfer_plan(in), std::invalid_argument);
    in.sliding_window = 1;  // rows see only themselves: page 0 is never read
    CHECK_NOTHROW(make_flashinfer_plan(in));
  }
  SECTION("a sequence beyond its block table") {
    lens[0] = 9;
    CHECK_THROWS_WITH(make_flashinfer_plan(in), Contains("beyond its block table"));
  }
  SECTION("a chunk size that is not a multiple of block_size") {
    in.kv_chunk_tokens = 6;
    CHECK_THROWS_WITH(make_flashinfer_plan(in), Contains("not a positive multiple"));
  }
  SECTION("query_start_loc not from 0, or decreasing") {
    qsl = {1, 2, 3};
    CHECK_THROWS_WITH(make_flashinfer_plan(in), Contains("query_start_loc[0]"));
    qsl = {0, 2, 1};
    CHECK_THROWS_WITH(make_flashinfer_plan(in), Contains("decreases"));
  }
  SECTION("a negative window, a bad block size") {
    in.sliding_window = -1;
    CHECK_THROWS_AS(make_flashinfer_plan(in), std::invalid_argument);
    in.sliding_window = 0;
    in.block_size = 0;
    CHECK_THROWS_AS(make_flashinfer_plan(in), std::invalid_argument);
  }
}

// ---- Against the CPU attention ----------------------------------------------------------------

TEST_CASE("flashinfer plan executed on the CPU equals octet attention", "[flashinfer_plan]") {
  struct Config {
    Shape shape;
    int64_t chunk_tokens;
  };
  // GQA 8/2 with 512-token chunks; MQA 4/1 with tiny chunks (many chunks, some of them hidden
  // from a row by the causal mask or the window); MHA with an odd block size and head_dim.
  const Config configs[] = {{{16, 8, 2, 64}, 512}, {{8, 4, 1, 32}, 16}, {{5, 3, 3, 37}, 15}};
  // Decode rows (< 8 queries) and prefills, contexts past 512 positions (several chunks).
  // 7 and 8 queries: either side of kFlashInferPrefillMinQueries.
  const std::vector<SeqSpec> specs{{1100, 1}, {9, 9},   {700, 12}, {1300, 3}, {16, 1},
                                   {33, 7},   {40, 8},  {600, 40}, {5, 2}};
  const DType dtypes[] = {DType::BF16, DType::FP8_E4M3};
  // No window; smaller than a page; not a multiple of block_size; spanning chunks; larger
  // than every context.
  const int64_t windows[] = {0, 3, 21, 600, 100000};
  uint32_t seed = 1;
  for (const Config& cf : configs)
    for (DType dtype : dtypes) {
      const Scene sc(dtype, cf.shape, specs, seed++);
      const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(cf.shape.head_dim));
      const float tol = 1e-5f * sc.vmax() + 1e-6f;
      // The batch in its order and reversed (another row layout).
      std::vector<int> reversed = sc.all();
      std::reverse(reversed.begin(), reversed.end());
      for (const std::vector<int>& order : {sc.all(), reversed})
        for (int64_t window : windows) {
          INFO("block_size " << cf.shape.block_size << ", heads " << cf.shape.num_heads << "/"
                             << cf.shape.num_kv_heads << ", chunk " << cf.chunk_tokens << ", "
                             << dtype_name(dtype) << ", window " << window << ", order "
                             << order.front() << "..");
          const Scene::Batch b = sc.batch(order);
          const FlashInferPlan p =
              make_flashinfer_plan(sc.plan_input(b, window, cf.chunk_tokens));
          CHECK(structure_problems(p, b, window).empty());
          const Executed x = execute_plan(p, sc.view(), b.q.data(), b.num_rows(),
                                          cf.shape.num_heads, softmax_scale);
          CHECK(x.problems.empty());
          INFO("tolerance " << tol);
          CHECK(max_abs_diff(x.out, cpu_attention(sc, b, window, softmax_scale)) <= tol);
        }
    }
}

TEST_CASE("flashinfer plan padded for a CUDA graph", "[flashinfer_plan]") {
  // A decode step (one query per sequence), padded to 8 requests and 8 x the chunks a request
  // can have: the padded plan computes the same bits, and its padding reads nothing.
  const Shape shape{16, 8, 2, 64};
  const int64_t chunk_tokens = 512;
  const Scene sc(DType::FP8_E4M3, shape, {{1030, 1}, {17, 1}, {513, 1}, {1, 1}, {600, 1}}, 99);
  const float softmax_scale = 0.125f, tol = 1e-5f * sc.vmax() + 1e-6f;
  const Scene::Batch b = sc.batch(sc.all());
  const int64_t graph_requests = 8;
  const int64_t graph_items =
      graph_requests * flashinfer_max_chunks(b.max_blocks, shape.block_size, chunk_tokens);
  CHECK(flashinfer_max_chunks(b.max_blocks, shape.block_size, chunk_tokens) == 3);
  for (int64_t window : {int64_t{0}, int64_t{300}}) {
    INFO("window " << window);
    const FlashInferPlan p = make_flashinfer_plan(sc.plan_input(b, window, chunk_tokens));
    const FlashInferPlan g = pad_flashinfer_plan(p, graph_requests, graph_items);
    REQUIRE(g.num_requests() == graph_requests);
    REQUIRE(g.num_items() == graph_items);
    CHECK(g.num_rows() == p.num_rows());
    CHECK(g.num_partial_states() == p.num_partial_states());
    for (int64_t r = 5; r < graph_requests; ++r) {
      CHECK(g.request_valid[r] == 0);
      CHECK(g.seq[r] == -1);
      CHECK(g.qo_indptr[r + 1] == g.qo_indptr[r]);
      CHECK(g.kv_indptr[r + 1] == g.kv_indptr[r]);
      CHECK(g.kv_last_page_len[r] == 0);
      CHECK(g.o_indptr[r + 1] == g.o_indptr[r]);
    }
    int64_t valid_items = 0;
    for (int64_t w = 0; w < g.num_items(); ++w) valid_items += g.item_valid[w];
    CHECK(valid_items == p.num_items());
    CHECK(structure_problems(g, b, window).empty());
    const Executed xp = execute_plan(p, sc.view(), b.q.data(), b.num_rows(), 8, softmax_scale);
    const Executed xg = execute_plan(g, sc.view(), b.q.data(), b.num_rows(), 8, softmax_scale);
    CHECK(xg.problems.empty());
    CHECK(std::memcmp(xp.out.data(), xg.out.data(), xp.out.size() * sizeof(float)) == 0);
    CHECK(max_abs_diff(xg.out, cpu_attention(sc, b, window, softmax_scale)) <= tol);
    CHECK_THROWS_AS(pad_flashinfer_plan(p, 4, graph_items), std::invalid_argument);
    CHECK_THROWS_AS(pad_flashinfer_plan(p, graph_requests, p.num_items() - 1),
                    std::invalid_argument);
  }
}

TEST_CASE("flashinfer plan of a sequence does not depend on its batch", "[flashinfer_plan]") {
  // Each sequence's requests (pages, lengths, chunks, items, state offsets) are the same alone
  // and in any batch, in any position.
  const Shape shape{16, 8, 2, 64};
  const Scene sc(DType::BF16, shape,
                 {{1100, 1}, {9, 9}, {700, 12}, {1300, 3}, {16, 1}, {33, 7}, {2, 2}}, 7);
  std::vector<int> reversed = sc.all();
  std::reverse(reversed.begin(), reversed.end());
  const std::vector<std::vector<int>> batches{sc.all(), reversed, {3, 0}, {6, 2, 5}};
  for (int64_t window : {int64_t{0}, int64_t{21}, int64_t{600}})
    for (int64_t chunk_tokens : {int64_t{512}, int64_t{64}}) {
      INFO("window " << window << ", chunk " << chunk_tokens);
      for (int s = 0; s < static_cast<int>(sc.seqs.size()); ++s) {
        const Scene::Batch alone = sc.batch({s});
        const auto expected =
            seq_view(make_flashinfer_plan(sc.plan_input(alone, window, chunk_tokens)), 0);
        REQUIRE(!expected.empty());
        for (const std::vector<int>& order : batches) {
          const auto at = std::find(order.begin(), order.end(), s);
          if (at == order.end()) continue;
          const Scene::Batch b = sc.batch(order);
          const FlashInferPlan p = make_flashinfer_plan(sc.plan_input(b, window, chunk_tokens));
          INFO("sequence " << s << " at " << (at - order.begin()));
          CHECK(seq_view(p, at - order.begin()) == expected);
        }
      }
    }
}

// ---- Folded FP8 scales ------------------------------------------------------------------------

TEST_CASE("flashinfer folded FP8 scales equal explicit dequantization", "[flashinfer_plan]") {
  // An E4M3 cache with per-KV-head k_scale / v_scale (codes from fp8_e4m3_from_float(x / s));
  // attention with k_scale folded into q per head and v_scale into the output per head (the
  // executor's FP8 path, how FlashInfer is fed) equals attention over an F32 cache holding the
  // explicitly dequantized values code * s. The two differ only in where the scale multiplies
  // (q_d s . code vs q_d . code s; s sum(p v) vs sum(p v s)): a few ulp per score and output,
  // inside the 1e-5 x max|V| bound of this file; both also match octet's CPU attention.
  const Shape shape{16, 8, 2, 64};
  const std::vector<SeqSpec> specs{{700, 1}, {40, 9}, {530, 3}, {1030, 12}};
  Scene f32(DType::F32, shape, specs, 5);  // its tables, queries and FP32 K/V are reused
  Scene e4m3(DType::FP8_E4M3, shape, specs, 5);
  REQUIRE(e4m3.tables == f32.tables);
  const int64_t bs = shape.block_size, row = shape.num_kv_heads * shape.head_dim;
  e4m3.k_scale = {0.011f, 0.023f};  // per KV head, non-powers of two
  e4m3.v_scale = {0.017f, 0.0075f};
  for (size_t s = 0; s < specs.size(); ++s)
    for (int64_t p = 0; p < specs[s].seq_len; ++p) {
      const int64_t slot = f32.tables[s][p / bs] * bs + p % bs;
      for (int64_t i = 0; i < row; ++i) {
        const int64_t h = i / shape.head_dim;
        const uint8_t kc = fp8_e4m3_from_float(f32.k_f32[s][p * row + i] / e4m3.k_scale[h]);
        const uint8_t vc = fp8_e4m3_from_float(f32.v_f32[s][p * row + i] / e4m3.v_scale[h]);
        e4m3.k[slot * row + i] = kc;
        e4m3.v[slot * row + i] = vc;
        const float kd = fp8_e4m3_to_float(kc) * e4m3.k_scale[h];
        const float vd = fp8_e4m3_to_float(vc) * e4m3.v_scale[h];
        std::memcpy(&f32.k[4 * (slot * row + i)], &kd, 4);
        std::memcpy(&f32.v[4 * (slot * row + i)], &vd, 4);
      }
    }
  const float softmax_scale = 0.125f, tol = 1e-5f * f32.vmax() + 1e-6f;
  CHECK(e4m3.vmax() == f32.vmax());
  for (int64_t window : {int64_t{0}, int64_t{100}}) {
    INFO("window " << window << ", tolerance " << tol);
    const Scene::Batch b = f32.batch(f32.all());
    const FlashInferPlan p = make_flashinfer_plan(f32.plan_input(b, window, 512));
    const Executed folded = execute_plan(p, e4m3.view(), b.q.data(), b.num_rows(), 8,
                                         softmax_scale);
    const Executed explicit_dq = execute_plan(p, f32.view(), b.q.data(), b.num_rows(), 8,
                                              softmax_scale);
    CHECK(folded.problems.empty());
    CHECK(explicit_dq.problems.empty());
    CHECK(max_abs_diff(folded.out, explicit_dq.out) <= tol);
    CHECK(max_abs_diff(folded.out, cpu_attention(e4m3, b, window, softmax_scale)) <= tol);
    CHECK(max_abs_diff(explicit_dq.out, cpu_attention(f32, b, window, softmax_scale)) <= tol);
  }
}

TEST_CASE("flashinfer decode rows executed on the CPU equal octet attention",
          "[flashinfer_plan]") {
  // The decode rows indexed by query row, pages read from the block table (what
  // flashinfer_decode reads): every decode row's output equals the CPU attention's, prefill
  // rows get no items, a split into sequence ranges (eager chunks) and a graph's padding change
  // no bit; a row's items and lengths do not depend on its batch.
  const Shape shape{16, 8, 2, 64};
  const int64_t C = 512;
  const std::vector<SeqSpec> specs{{1100, 1}, {9, 9}, {700, 3}, {1300, 1}, {16, 1},
                                   {33, 7},   {40, 8}, {5, 2}};
  for (DType dtype : {DType::BF16, DType::FP8_E4M3}) {
    const Scene sc(dtype, shape, specs, 41);
    const float softmax_scale = 0.125f, tol = 1e-5f * sc.vmax() + 1e-6f;
    std::vector<int> reversed = sc.all();
    std::reverse(reversed.begin(), reversed.end());
    for (const std::vector<int>& order : {sc.all(), reversed})
    for (int64_t window : {int64_t{0}, int64_t{21}, int64_t{600}}) {
      INFO(dtype_name(dtype) << ", window " << window << ", order " << order.front() << "..");
      const Scene::Batch b = sc.batch(order);
      const FlashInferPlanInput in = sc.plan_input(b, window, C);
      const int64_t num_seqs = static_cast<int64_t>(order.size());
      const FlashInferDecodeRows d = flashinfer_decode_rows(in, 0, b.num_rows());
      REQUIRE(d.rows() == b.num_rows());
      const int64_t window_left = window > 0 ? window - 1 : -1;
      const Executed x = execute_decode_rows(d, b.tables, C, window_left, sc.view(), b.q.data(),
                                             shape.num_heads, softmax_scale);
      CHECK(x.problems.empty());
      const std::vector<float> ref = cpu_attention(sc, b, window, softmax_scale);
      const int64_t width = shape.num_heads * shape.head_dim;
      int64_t decode_rows = 0;
      for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t r0 = b.qsl[s], r1 = b.qsl[s + 1];
        const bool decode = r1 - r0 < kFlashInferPrefillMinQueries;
        for (int64_t r = r0; r < r1; ++r) {
          INFO("row " << r);
          CHECK((d.o_indptr[r + 1] > d.o_indptr[r]) == decode);
          if (!decode) continue;
          ++decode_rows;
          const std::vector<float> got(x.out.begin() + r * width, x.out.begin() + (r + 1) * width);
          const std::vector<float> want(ref.begin() + r * width, ref.begin() + (r + 1) * width);
          CHECK(max_abs_diff(got, want) <= tol);
          // Chunks: ceil(kept / C), the kept tokens from the window's first page.
          const int64_t end = b.lens[s] - (r1 - r0) + (r - r0) + 1;
          const int64_t lo = window > 0 ? std::max<int64_t>(0, end - window) : 0;
          CHECK(d.kv_len[r] == end - lo / shape.block_size * shape.block_size);
          CHECK(d.o_indptr[r + 1] - d.o_indptr[r] == (d.kv_len[r] + C - 1) / C);
        }
      }
      CHECK(decode_rows == 1 + 3 + 1 + 1 + 7 + 2);
      // Eager chunks: row ranges give the same rows bit for bit.
      std::vector<float> chunked(x.out.size(), -7.0f);
      for (int64_t first = 0; first < b.num_rows(); first += 5) {
        const Executed xc = execute_decode_rows(
            flashinfer_decode_rows(in, first, std::min(first + 5, b.num_rows())), b.tables, C,
            window_left, sc.view(), b.q.data(), shape.num_heads, softmax_scale);
        CHECK(xc.problems.empty());
        for (size_t i = 0; i < chunked.size(); ++i)
          if (xc.out[i] != -7.0f) chunked[i] = xc.out[i];
      }
      CHECK(std::memcmp(chunked.data(), x.out.data(), x.out.size() * sizeof(float)) == 0);
      // A graph's padding: masked items change nothing.
      const FlashInferDecodeRows g = pad_flashinfer_decode_rows(d, d.num_items() + 17);
      const Executed xg = execute_decode_rows(g, b.tables, C, window_left, sc.view(), b.q.data(),
                                              shape.num_heads, softmax_scale);
      CHECK(xg.problems.empty());
      CHECK(std::memcmp(xg.out.data(), x.out.data(), x.out.size() * sizeof(float)) == 0);
      CHECK_THROWS_AS(pad_flashinfer_decode_rows(d, d.num_items() - 1), std::invalid_argument);
    }
  }
  const Scene sc(DType::BF16, shape, specs, 42);
  const Scene::Batch b = sc.batch(sc.all());
  FlashInferPlanInput in = sc.plan_input(b, 0, C);
  const int64_t rows = b.num_rows();
  CHECK_THROWS_AS(flashinfer_decode_rows(in, 2, 1), std::invalid_argument);
  CHECK_THROWS_AS(flashinfer_decode_rows(in, 0, rows + 1), std::invalid_argument);
  in.kv_chunk_tokens = 500;  // not a multiple of block_size 16
  CHECK_THROWS_AS(flashinfer_decode_rows(in, 0, rows), std::invalid_argument);
  in = sc.plan_input(b, 0, C);
  std::vector<int64_t> lens = b.lens;
  lens[0] = b.max_blocks * shape.block_size + 1;  // past its block table
  in.seq_lens = lens.data();
  CHECK_THROWS_AS(flashinfer_decode_rows(in, 0, rows), std::invalid_argument);
  // The kernel's 32-bit token offsets (page_start x block_size + chunk start) over the whole
  // flattened table, plus a chunk of thread offsets: below 2^32 fits, at 2^32 does not.
  CHECK(flashinfer_decode_addressable(1, (int64_t{1} << 28) - 64, 16, 512));
  CHECK_FALSE(flashinfer_decode_addressable(1, (int64_t{1} << 28) - 32, 16, 512));
  CHECK_FALSE(flashinfer_decode_addressable(1, int64_t{1} << 28, 16, 512));
  CHECK_FALSE(flashinfer_decode_addressable(512, int64_t{1} << 19, 16, 512));  // 8M tokens each
  in = sc.plan_input(b, 0, C);
  in.max_blocks_per_seq = (int64_t{1} << 32) / 16 / in.num_seqs;  // the table alone reaches 2^32
  CHECK_THROWS_AS(flashinfer_decode_rows(in, 0, rows), std::invalid_argument);
}

TEST_CASE("flashinfer prefill requests list only their own pages and tiles",
          "[flashinfer_plan]") {
  // What flashinfer_prefill reads: one request a sequence over its rows (CSR: query_start_loc);
  // pages (make_flashinfer_plan's kept pages) and query tiles only for the prefill sequences
  // of the range, tiles covering each one's queries x group packed rows exactly;
  // row_is_prefill marking exactly their rows. Ranges split the work without losing or
  // repeating a tile.
  const Shape shape{16, 8, 2, 64};
  const Scene sc(DType::BF16, shape,
                 {{1100, 1}, {9, 9}, {700, 40}, {1300, 3}, {33, 7}, {600, 17}, {5, 2}}, 5);
  const Scene::Batch b = sc.batch(sc.all());
  const FlashInferPlanInput in = sc.plan_input(b, 300, 512);
  const FlashInferPlan p = make_flashinfer_plan(in);
  const int64_t group = 4, tile = 128, n = in.num_seqs;
  std::vector<int> tiles_seen(static_cast<size_t>(n), 0);
  std::vector<int> row_marks(static_cast<size_t>(b.num_rows()), 0);
  for (int64_t first = 0; first < n; first += 3) {
    const int64_t last = std::min(first + 3, n);
    const FlashInferPrefillRequests q = flashinfer_prefill_requests(in, first, last, group, tile);
    REQUIRE(q.num_requests() == n);
    CHECK(as_i64(q.qo_indptr) == b.qsl);
    for (int64_t s = 0; s < n; ++s) {
      INFO("sequence " << s);
      const int64_t nq = b.qsl[s + 1] - b.qsl[s];
      const bool mine = s >= first && s < last && nq >= kFlashInferPrefillMinQueries;
      const std::vector<int32_t> pages(q.kv_indices.begin() + q.kv_indptr[s],
                                       q.kv_indices.begin() + q.kv_indptr[s + 1]);
      std::vector<int32_t> want;
      int32_t want_last = 0;
      for (int64_t r = 0; r < p.num_requests() && mine; ++r)
        if (p.seq[r] == s) {
          want.assign(p.kv_indices.begin() + p.kv_indptr[r], p.kv_indices.begin() + p.kv_indptr[r + 1]);
          want_last = p.kv_last_page_len[r];
        }
      CHECK(pages == want);
      CHECK(q.kv_last_page_len[s] == want_last);
    }
    for (int64_t w = 0; w < q.num_items(); ++w) {
      const int64_t s = q.request_indices[w];
      REQUIRE((s >= first && s < last && b.qsl[s + 1] - b.qsl[s] >= kFlashInferPrefillMinQueries));
      CHECK(q.qo_tile_indices[w] == tiles_seen[s]++);  // tiles in order, each once
    }
    for (int64_t row = 0; row < b.num_rows(); ++row) row_marks[row] += q.row_is_prefill[row];
  }
  for (int64_t s = 0; s < n; ++s) {
    const int64_t nq = b.qsl[s + 1] - b.qsl[s];
    const bool prefill = nq >= kFlashInferPrefillMinQueries;
    CHECK(tiles_seen[s] == (prefill ? (nq * group + tile - 1) / tile : 0));
    for (int64_t row = b.qsl[s]; row < b.qsl[s + 1]; ++row)
      CHECK(row_marks[row] == (prefill ? 1 : 0));
  }
  CHECK(tiles_seen[2] == 2);  // 40 queries x 4 heads = 160 packed rows: two tiles of 128
  CHECK_THROWS_AS(flashinfer_prefill_requests(in, 0, n + 1, group, tile), std::invalid_argument);
  CHECK_THROWS_AS(flashinfer_prefill_requests(in, 0, 1, 0, tile), std::invalid_argument);
}

TEST_CASE("flashinfer plan buffers read back as the plans", "[flashinfer_plan]") {
  // The one int32 buffer a call uploads (flashinfer_layout.h): every array the kernels are
  // given (flashinfer_*_arrays) holds the plan's values, nothing overlaps (a fill pattern
  // around each array survives), and a graph's padded decode plan carries the real item count.
  const Shape shape{16, 8, 2, 64};
  const Scene sc(DType::BF16, shape,
                 {{1100, 1}, {9, 9}, {700, 40}, {1300, 3}, {33, 7}, {600, 17}, {5, 2}}, 9);
  const Scene::Batch b = sc.batch(sc.all());
  const FlashInferPlanInput in = sc.plan_input(b, 300, 512);
  const int64_t rows = b.num_rows();
  const auto same = [](const int32_t* got, const auto& want) {
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != static_cast<int32_t>(want[i])) return false;
    return true;
  };

  const FlashInferDecodeRows d = pad_flashinfer_decode_rows(
      flashinfer_decode_rows(in, 0, rows), flashinfer_decode_rows(in, 0, rows).num_items() + 9);
  const FlashInferDecodeLayout dl = flashinfer_decode_layout(rows, d.num_items());
  std::vector<int32_t> dbuf(dl.ints + 8, -12345);
  fill_flashinfer_decode(dl, d, 512, dbuf.data());
  CHECK(dbuf[dl.ints] == -12345);  // nothing written past the layout
  const FlashInferDecodeArrays da = flashinfer_decode_arrays(dbuf.data(), dl);
  CHECK(*da.chunk_tokens == 512);
  CHECK(*da.item_count == d.num_items() - 9);  // padding past the count
  CHECK(same(da.page_start, d.page_start));
  CHECK(same(da.kv_len, d.kv_len));
  CHECK(same(da.o_indptr, d.o_indptr));
  CHECK(same(da.request_indices, d.request_indices));
  CHECK(same(da.kv_tile_indices, d.kv_tile_indices));
  CHECK(dl.ints == 2 + (rows + 1) + rows + (rows + 1) + 2 * static_cast<size_t>(d.num_items()));

  for (int64_t first : {int64_t{0}, int64_t{4}}) {
    const FlashInferPrefillRequests p = flashinfer_prefill_requests(in, first, 7, 4, 128);
    const FlashInferPrefillLayout pl = flashinfer_prefill_layout(p);
    std::vector<int32_t> pbuf(pl.ints + 8, -12345);
    fill_flashinfer_prefill(pl, p, 512, pbuf.data());
    CHECK(pbuf[pl.ints] == -12345);
    const FlashInferPrefillArrays pa = flashinfer_prefill_arrays(pbuf.data(), pl);
    CHECK(*pa.chunk_tokens == 512);
    CHECK(same(pa.qo_indptr, p.qo_indptr));
    CHECK(same(pa.kv_indptr, p.kv_indptr));
    CHECK(same(pa.kv_last_page_len, p.kv_last_page_len));
    CHECK(same(pa.request_indices, p.request_indices));
    CHECK(same(pa.qo_tile_indices, p.qo_tile_indices));
    CHECK(same(pa.kv_indices, p.kv_indices));
    CHECK(std::all_of(pa.kv_tile_indices, pa.kv_tile_indices + p.num_items(),
                      [](int32_t t) { return t == 0; }));
    CHECK(std::equal(p.row_is_prefill.begin(), p.row_is_prefill.end(), pa.row_is_prefill));
    CHECK(pa.kv_tile_indices + p.num_items() <= reinterpret_cast<const int32_t*>(pa.row_is_prefill));
  }
}
