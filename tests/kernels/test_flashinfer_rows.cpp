// FlashInfer's row-indexed decode plan and prefill requests (kernels/cuda/flashinfer_plan.h)
// and the buffers each call uploads (kernels/cuda/flashinfer_layout.h), without a GPU: the
// decode plan executed on the CPU as flashinfer_decode reads it (pages through the flattened
// block table, one partial state per item, octet's merge) against octet's CPU attention; the
// prefill requests' pages, tiles and rows; every array of a buffer read back as the plan's.
// Tolerance as test_flashinfer_plan.cpp's: 1e-5 x max|V| + 1e-6.
#include "flashinfer_scene.h"

#include "kernels/cuda/flashinfer_layout.h"

using namespace octet;
using namespace octet::cuda_kernels;
using namespace octet_test::flashinfer;

namespace {

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
