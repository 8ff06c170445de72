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
#include "flashinfer_scene.h"

using namespace octet;
using namespace octet_test::flashinfer;

namespace {

// ---- The executor: attention from the plan alone ---------------------------------------------

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
