// The host-side plan of FlashInfer's paged attention kernels (issue 26): octet's batch
// (query_start_loc, seq_lens, block_tables, sliding window) as FlashInfer's requests (CSR page
// lists, last-page lengths) and a fixed-size split-KV work list with its merge order. Plain
// C++17 without CUDA types, so tests/kernels/test_flashinfer_plan.cpp checks it against the CPU
// attention in every CI build, GPU or not.
//
// Requests. A sequence with fewer than kFlashInferPrefillMinQueries queries (decode rows, as
// attention.h decides) gives one request per query row, whose KV ends at that row's position;
// a sequence with at least that many gives one request for all its rows (prefill). Requests
// follow the batch's row order, so qo_indptr is octet's own row index: request i owns rows
// [qo_indptr[i], qo_indptr[i+1]) of q and out (the decode kernel, which reads request i's query
// at row i, needs its rows gathered when prefills sit between them). A request keeps only the
// pages some query of it can see: whole pages before the window of its first query are
// dropped, so its KV starts at kv_start, a multiple of block_size. FlashInfer's masks align
// queries to the end of the KV (query j of a request at kept position kv_len - qo_len + j), so
// the causal mask and the sliding window (window_left = window - 1: kv_idx + qo_len +
// window_left >= kv_len + j) give octet's rule (absolute position p sees max(0, p - window + 1)
// .. p) unchanged: the drop shifts query and KV alike.
//
// Split. Chunk c of a request covers its kept tokens [c * C, (c + 1) * C), C = kv_chunk_tokens
// (fixed, a multiple of block_size): a request's chunks depend on that request alone, never on
// the batch (batch invariance). The partial state (output, log-sum-exp) of row j of request i in
// chunk c is slot o_indptr[i] + j * num_chunks[i] + c; row r's slots, [merge_indptr[r],
// merge_indptr[r + 1]), merge in chunk order. A chunk may hide every key from a row (causal or
// window): its state is then empty (lse = -inf) and the merge skips it.
// This is the chunking of FlashInfer's batch decode kernel, and of its batch prefill kernel
// without a window. With a window, that prefill kernel starts each query tile's chunks at the
// tile's window start and lays out ceil(min(kv_len, window_left + CTA_TILE_Q) / C) states per
// row (prefill.cuh): run windowed prefills unsplit, or give this plan its query tiles first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace octet::cuda_kernels {

/// Queries from which a sequence is one prefill request (= kPrefillMinQueries of attention.h).
inline constexpr int64_t kFlashInferPrefillMinQueries = 8;
/// The default fixed split size, in tokens.
inline constexpr int64_t kFlashInferChunkTokens = 512;

/// One batch as the plan reads it, all host memory.
struct FlashInferPlanInput {
  int64_t num_seqs = 0;
  const int64_t* query_start_loc = nullptr;  // [num_seqs + 1], rows of q / out, from 0
  const int64_t* seq_lens = nullptr;         // [num_seqs], tokens after this step
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq] page ids
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;        // tokens per page
  int64_t num_blocks = 0;        // pages in the cache: page ids are in [0, num_blocks)
  int64_t sliding_window = 0;    // tokens a query sees, itself included; 0 = full causal
  int64_t kv_chunk_tokens = kFlashInferChunkTokens;  // C, > 0, a multiple of block_size
};

/// FlashInfer's metadata for one batch (R requests, W work items, N query rows). int32 as
/// FlashInfer's IdType. Padded entries (pad_flashinfer_plan) have valid flag 0.
struct FlashInferPlan {
  int64_t block_size = 0;
  int64_t kv_chunk_tokens = 0;
  int64_t window_left = -1;  // sliding_window - 1, or -1: no window

  // Requests: [R] (indptrs [R + 1]).
  std::vector<int32_t> qo_indptr;         // rows of q / out (octet's row index)
  std::vector<int32_t> kv_indptr;         // into kv_indices
  std::vector<int32_t> kv_indices;        // page ids, in position order
  std::vector<int32_t> kv_last_page_len;  // tokens in the last page, 1..block_size (0: no page)
  std::vector<int32_t> kv_len;            // kept tokens: (pages - 1) * block_size + last
  std::vector<int32_t> kv_start;          // absolute position of kept token 0
  std::vector<int32_t> seq;               // octet sequence index (-1: padding)
  std::vector<uint8_t> is_prefill;        // 1: prefill kernel, 0: decode (qo_len 1)
  std::vector<uint8_t> request_valid;
  std::vector<int32_t> num_chunks;        // ceil(kv_len / C)
  std::vector<int32_t> o_indptr;          // partial-state slots of each request

  // Work items: [W], requests in order, chunks in order within each.
  std::vector<int32_t> request_indices;
  std::vector<int32_t> kv_tile_indices;   // chunk index within the request
  std::vector<uint8_t> item_valid;

  // Merge: [N + 1], row r's partial states, in chunk order.
  std::vector<int32_t> merge_indptr;

  int64_t num_requests() const { return static_cast<int64_t>(kv_len.size()); }
  int64_t num_items() const { return static_cast<int64_t>(request_indices.size()); }
  int64_t num_rows() const { return static_cast<int64_t>(merge_indptr.size()) - 1; }
  int64_t num_partial_states() const { return o_indptr.empty() ? 0 : o_indptr.back(); }
};

namespace flashinfer_plan_detail {

[[noreturn]] inline void fail(const std::string& what) {
  throw std::invalid_argument("flashinfer plan: " + what);
}

inline int32_t to_i32(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int32_t>::max())
    fail(std::string(what) + " " + std::to_string(v) + " does not fit int32");
  return static_cast<int32_t>(v);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Sequence s of the batch: its queries ([query_start_loc[s], query_start_loc[s + 1]) within
/// the batch's rows) fit its seq_len, which fits its block table; else fail().
template <typename Input>
void check_sequence(const Input& in, int64_t s) {
  const int64_t rows = in.query_start_loc[in.num_seqs];
  const int64_t nq = in.query_start_loc[s + 1] - in.query_start_loc[s], len = in.seq_lens[s];
  const std::string name = "sequence " + std::to_string(s) + ": ";
  if (nq < 0 || in.query_start_loc[s + 1] > rows) fail(name + "query_start_loc decreases");
  if (len < nq)
    fail(name + "seq_len " + std::to_string(len) + " < its " + std::to_string(nq) + " queries");
  if (len > in.max_blocks_per_seq * in.block_size)
    fail(name + "seq_len " + std::to_string(len) + " beyond its block table (" +
         std::to_string(in.max_blocks_per_seq) + " pages of " + std::to_string(in.block_size) +
         ")");
}

}  // namespace flashinfer_plan_detail

/// Chunks a request can have at most with this block table: a kept range spans at most
/// max_blocks_per_seq pages. Sizes a graph's work list (graph requests x this).
inline int64_t flashinfer_max_chunks(int64_t max_blocks_per_seq, int64_t block_size,
                                     int64_t kv_chunk_tokens) {
  return std::max<int64_t>(
      1, flashinfer_plan_detail::ceil_div(max_blocks_per_seq * block_size, kv_chunk_tokens));
}

/// The plan of one batch. Throws std::invalid_argument on inconsistent input: bad sizes, a
/// query_start_loc not starting at 0 or decreasing, seq_lens[s] < queries of s, a sequence
/// beyond its block table, a page id outside [0, num_blocks) in a kept page, a chunk size that
/// is not a positive multiple of block_size, counts beyond int32.
inline FlashInferPlan make_flashinfer_plan(const FlashInferPlanInput& in) {
  using namespace flashinfer_plan_detail;
  if (in.num_seqs < 0) fail("num_seqs < 0");
  if (in.block_size <= 0) fail("block_size must be positive");
  if (in.sliding_window < 0) fail("sliding_window < 0");
  if (in.kv_chunk_tokens <= 0 || in.kv_chunk_tokens % in.block_size != 0)
    fail("kv_chunk_tokens " + std::to_string(in.kv_chunk_tokens) +
         " is not a positive multiple of block_size " + std::to_string(in.block_size));
  if (in.num_seqs > 0 && (!in.query_start_loc || !in.seq_lens || !in.block_tables))
    fail("null batch array");
  if (in.num_seqs > 0 && in.max_blocks_per_seq <= 0) fail("max_blocks_per_seq must be positive");
  if (in.num_seqs > 0 && in.query_start_loc[0] != 0) fail("query_start_loc[0] must be 0");

  FlashInferPlan p;
  p.block_size = in.block_size;
  p.kv_chunk_tokens = in.kv_chunk_tokens;
  p.window_left = in.sliding_window > 0 ? in.sliding_window - 1 : -1;
  p.qo_indptr.push_back(0);
  p.kv_indptr.push_back(0);
  p.o_indptr.push_back(0);
  p.merge_indptr.push_back(0);
  const int64_t bs = in.block_size, C = in.kv_chunk_tokens;

  // One request: rows [row0, row0 + qo_len) at positions end - qo_len .. end - 1 of sequence s.
  auto add_request = [&](int64_t s, int64_t row0, int64_t qo_len, int64_t end, bool prefill) {
    const int64_t first_pos = end - qo_len;
    const int64_t lo = in.sliding_window > 0
                           ? std::max<int64_t>(0, first_pos - in.sliding_window + 1) : 0;
    const int64_t first_page = lo / bs, end_page = ceil_div(end, bs);
    const int32_t* table = in.block_tables + s * in.max_blocks_per_seq;
    for (int64_t j = first_page; j < end_page; ++j) {
      if (table[j] < 0 || table[j] >= in.num_blocks)
        fail("block_tables[" + std::to_string(s) + ", " + std::to_string(j) + "] = " +
             std::to_string(table[j]) + " is not a page id in [0, " +
             std::to_string(in.num_blocks) + ")");
      p.kv_indices.push_back(table[j]);
    }
    const int64_t kv_len = end - first_page * bs;
    const int64_t chunks = std::max<int64_t>(1, ceil_div(kv_len, C));
    const int32_t r = to_i32(p.num_requests(), "requests");
    p.kv_indptr.push_back(to_i32(static_cast<int64_t>(p.kv_indices.size()), "pages"));
    p.kv_last_page_len.push_back(static_cast<int32_t>(end - (end_page - 1) * bs));
    p.kv_len.push_back(to_i32(kv_len, "kv_len"));
    p.kv_start.push_back(to_i32(first_page * bs, "kv_start"));
    p.seq.push_back(to_i32(s, "sequence"));
    p.is_prefill.push_back(prefill ? 1 : 0);
    p.request_valid.push_back(1);
    p.num_chunks.push_back(static_cast<int32_t>(chunks));
    p.qo_indptr.push_back(to_i32(row0 + qo_len, "query rows"));
    for (int64_t c = 0; c < chunks; ++c) {
      p.request_indices.push_back(r);
      p.kv_tile_indices.push_back(static_cast<int32_t>(c));
      p.item_valid.push_back(1);
    }
    for (int64_t j = 0; j < qo_len; ++j)
      p.merge_indptr.push_back(to_i32(p.merge_indptr.back() + chunks, "partial states"));
    p.o_indptr.push_back(p.merge_indptr.back());
  };

  for (int64_t s = 0; s < in.num_seqs; ++s) {
    check_sequence(in, s);
    const int64_t row0 = in.query_start_loc[s], nq = in.query_start_loc[s + 1] - row0;
    const int64_t len = in.seq_lens[s];
    if (nq >= kFlashInferPrefillMinQueries) {
      add_request(s, row0, nq, len, true);
    } else {
      for (int64_t j = 0; j < nq; ++j) add_request(s, row0 + j, 1, len - nq + j + 1, false);
    }
  }
  return p;
}

/// `p` padded to num_requests requests and num_items work items (fixed sizes, as a CUDA graph
/// needs): padded requests have no rows (qo_indptr repeats), no pages (kv_indptr repeats),
/// kv_last_page_len, kv_len, kv_start and num_chunks 0, seq -1, no partial states; padded items
/// point at request 0, chunk 0 and must be skipped (item_valid 0). Rows and merge_indptr are
/// unchanged. Throws std::invalid_argument when p needs more than the given sizes.
inline FlashInferPlan pad_flashinfer_plan(const FlashInferPlan& p, int64_t num_requests,
                                          int64_t num_items) {
  using flashinfer_plan_detail::fail;
  if (num_requests < p.num_requests() || num_items < p.num_items())
    fail("the batch needs " + std::to_string(p.num_requests()) + " requests and " +
         std::to_string(p.num_items()) + " work items, more than the padded " +
         std::to_string(num_requests) + " and " + std::to_string(num_items));
  if (num_requests < 1) fail("a padded plan needs at least one request");
  FlashInferPlan q = p;
  for (int64_t r = p.num_requests(); r < num_requests; ++r) {
    q.qo_indptr.push_back(q.qo_indptr.back());
    q.kv_indptr.push_back(q.kv_indptr.back());
    q.kv_last_page_len.push_back(0);
    q.kv_len.push_back(0);
    q.kv_start.push_back(0);
    q.seq.push_back(-1);
    q.is_prefill.push_back(0);
    q.request_valid.push_back(0);
    q.num_chunks.push_back(0);
    q.o_indptr.push_back(q.o_indptr.back());
  }
  for (int64_t w = p.num_items(); w < num_items; ++w) {
    q.request_indices.push_back(0);
    q.kv_tile_indices.push_back(0);
    q.item_valid.push_back(0);
  }
  return q;
}

/// The decode rows [first_row, last_row) of a batch as flashinfer_decode
/// (flashinfer_decode.h) reads them. FlashInfer's decode kernel reads request i's query at row
/// i, so requests are indexed by query row; a request's pages are read straight from the
/// device block table ([num_seqs, max_blocks_per_seq], flattened): its kept page j is
/// block_tables[page_start[r] + j]. Rows outside the range and rows of prefills (>=
/// kFlashInferPrefillMinQueries queries) have kv_len 0 and no items. Keeping, window and
/// chunks as make_flashinfer_plan's; items in row order, chunks in order.
struct FlashInferDecodeRows {
  std::vector<int32_t> page_start;       // [rows + 1]; page_start[rows] = the table's size
  std::vector<int32_t> kv_len;           // [rows], kept tokens
  std::vector<int32_t> o_indptr;         // [rows + 1]: row r's items [o_indptr[r], o_indptr[r+1])
  std::vector<int32_t> request_indices;  // [W]: the item's row
  std::vector<int32_t> kv_tile_indices;  // [W]: its chunk
  std::vector<uint8_t> item_valid;       // [W]: 0 for padding (past o_indptr[rows]: never run)

  int64_t rows() const { return static_cast<int64_t>(kv_len.size()); }
  int64_t num_items() const { return static_cast<int64_t>(request_indices.size()); }
};

/// Whether FlashInfer's decode kernel can address this block table: it computes a row's first
/// token as page_start x block_size + chunk start in 32 bits (decode.cuh), and page_start
/// indexes the whole flattened table.
inline bool flashinfer_decode_addressable(int64_t num_seqs, int64_t max_blocks_per_seq,
                                          int64_t block_size, int64_t kv_chunk_tokens) {
  return num_seqs * max_blocks_per_seq * block_size + kv_chunk_tokens <
         (int64_t{1} << 32);
}

/// Throws std::invalid_argument on inconsistent input (as make_flashinfer_plan; page ids are
/// not read), a row range outside the batch or a table flashinfer_decode_addressable refuses.
inline FlashInferDecodeRows flashinfer_decode_rows(const FlashInferPlanInput& in,
                                                   int64_t first_row, int64_t last_row) {
  using namespace flashinfer_plan_detail;
  if (in.block_size <= 0) fail("block_size must be positive");
  if (in.sliding_window < 0) fail("sliding_window < 0");
  if (in.kv_chunk_tokens <= 0 || in.kv_chunk_tokens % in.block_size != 0)
    fail("kv_chunk_tokens " + std::to_string(in.kv_chunk_tokens) +
         " is not a positive multiple of block_size " + std::to_string(in.block_size));
  if (in.num_seqs < 0) fail("num_seqs < 0");
  if (in.num_seqs > 0 && (!in.query_start_loc || !in.seq_lens)) fail("null batch array");
  if (in.num_seqs > 0 && in.query_start_loc[0] != 0) fail("query_start_loc[0] must be 0");
  const int64_t rows = in.num_seqs > 0 ? in.query_start_loc[in.num_seqs] : 0;
  if (first_row < 0 || last_row < first_row || last_row > rows)
    fail("rows [" + std::to_string(first_row) + ", " + std::to_string(last_row) + ") of " +
         std::to_string(rows));
  if (!flashinfer_decode_addressable(in.num_seqs, in.max_blocks_per_seq, in.block_size,
                                     in.kv_chunk_tokens))
    fail("a block table of " + std::to_string(in.num_seqs) + " x " +
         std::to_string(in.max_blocks_per_seq) + " pages of " + std::to_string(in.block_size) +
         " tokens is beyond 32-bit token offsets");
  const int64_t bs = in.block_size, C = in.kv_chunk_tokens;
  FlashInferDecodeRows d;
  d.page_start.assign(static_cast<size_t>(rows + 1), 0);
  d.page_start[rows] = to_i32(in.num_seqs * in.max_blocks_per_seq, "block table size");
  d.kv_len.assign(static_cast<size_t>(rows), 0);
  d.o_indptr.assign(static_cast<size_t>(rows + 1), 0);
  for (int64_t s = 0; s < in.num_seqs; ++s) {
    check_sequence(in, s);
    const int64_t row0 = in.query_start_loc[s], nq = in.query_start_loc[s + 1] - row0;
    const int64_t len = in.seq_lens[s];
    if (nq >= kFlashInferPrefillMinQueries) continue;
    for (int64_t j = 0; j < nq; ++j) {
      const int64_t r = row0 + j, end = len - nq + j + 1;
      if (r < first_row || r >= last_row) continue;
      const int64_t lo = in.sliding_window > 0
                             ? std::max<int64_t>(0, end - in.sliding_window) : 0;
      const int64_t first_page = lo / bs;
      d.page_start[r] = to_i32(s * in.max_blocks_per_seq + first_page, "page index");
      d.kv_len[r] = to_i32(end - first_page * bs, "kv_len");
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t chunks = ceil_div(d.kv_len[r], C);
    for (int64_t c = 0; c < chunks; ++c) {
      d.request_indices.push_back(static_cast<int32_t>(r));
      d.kv_tile_indices.push_back(static_cast<int32_t>(c));
      d.item_valid.push_back(1);
    }
    d.o_indptr[r + 1] = to_i32(static_cast<int64_t>(d.request_indices.size()), "items");
  }
  return d;
}

/// `d` with padding items up to num_items (a graph's fixed grid): row 0, chunk 0, valid 0.
/// Throws std::invalid_argument when d has more.
inline FlashInferDecodeRows pad_flashinfer_decode_rows(FlashInferDecodeRows d,
                                                       int64_t num_items) {
  if (num_items < d.num_items())
    flashinfer_plan_detail::fail("the batch needs " + std::to_string(d.num_items()) +
                                 " decode items, more than the padded " +
                                 std::to_string(num_items));
  d.request_indices.resize(static_cast<size_t>(num_items), 0);
  d.kv_tile_indices.resize(static_cast<size_t>(num_items), 0);
  d.item_valid.resize(static_cast<size_t>(num_items), 0);
  return d;
}

/// The prefill sequences of [first_seq, last_seq) as flashinfer_prefill (flashinfer_prefill.h)
/// reads them. FlashInfer's q / o indptr must be a CSR over all rows, so every sequence is one
/// request covering its rows; only prefill sequences (>= kFlashInferPrefillMinQueries
/// queries) of the range list pages (make_flashinfer_plan's kept pages) and work items, one
/// per query tile of tile_rows packed (query, head-of-group) rows, never split (kv tile 0).
struct FlashInferPrefillRequests {
  std::vector<int32_t> qo_indptr;         // [R + 1]: query_start_loc
  std::vector<int32_t> kv_indptr;         // [R + 1]
  std::vector<int32_t> kv_indices;
  std::vector<int32_t> kv_last_page_len;  // [R]
  std::vector<int32_t> request_indices;   // [W]
  std::vector<int32_t> qo_tile_indices;   // [W]
  std::vector<uint8_t> row_is_prefill;    // [rows]: rows this call writes

  int64_t num_requests() const { return static_cast<int64_t>(kv_last_page_len.size()); }
  int64_t num_items() const { return static_cast<int64_t>(request_indices.size()); }
};

/// Throws std::invalid_argument on inconsistent input (as make_flashinfer_plan), a bad range,
/// group or tile size.
inline FlashInferPrefillRequests flashinfer_prefill_requests(const FlashInferPlanInput& in,
                                                             int64_t first_seq,
                                                             int64_t last_seq, int64_t group,
                                                             int64_t tile_rows) {
  using namespace flashinfer_plan_detail;
  if (in.num_seqs < 0 || first_seq < 0 || last_seq < first_seq || last_seq > in.num_seqs)
    fail("sequences [" + std::to_string(first_seq) + ", " + std::to_string(last_seq) + ") of " +
         std::to_string(in.num_seqs));
  if (group <= 0 || tile_rows <= 0) fail("group and tile rows must be positive");
  if (in.num_seqs > 0 && (!in.query_start_loc || !in.seq_lens || !in.block_tables))
    fail("null batch array");
  if (in.num_seqs > 0 && in.query_start_loc[0] != 0) fail("query_start_loc[0] must be 0");
  for (int64_t s = 0; s < in.num_seqs; ++s)
    if (in.query_start_loc[s + 1] < in.query_start_loc[s])
      fail("sequence " + std::to_string(s) + ": query_start_loc decreases");
  FlashInferPrefillRequests q;
  q.qo_indptr.push_back(0);
  q.kv_indptr.push_back(0);
  for (int64_t s = 0; s < in.num_seqs; ++s) {
    const int64_t nq = in.query_start_loc[s + 1] - in.query_start_loc[s];
    const bool mine = s >= first_seq && s < last_seq && nq >= kFlashInferPrefillMinQueries;
    int32_t last_page = 0;
    if (mine) {
      // This sequence's request as make_flashinfer_plan makes it (checks included).
      FlashInferPlanInput one = in;
      const int64_t qsl[2] = {0, nq};
      one.num_seqs = 1;
      one.query_start_loc = qsl;
      one.seq_lens = in.seq_lens + s;
      one.block_tables = in.block_tables + s * in.max_blocks_per_seq;
      const FlashInferPlan p = make_flashinfer_plan(one);
      q.kv_indices.insert(q.kv_indices.end(), p.kv_indices.begin(), p.kv_indices.end());
      last_page = p.kv_last_page_len[0];
      const int64_t tiles = (nq * group + tile_rows - 1) / tile_rows;
      for (int64_t t = 0; t < tiles; ++t) {
        q.request_indices.push_back(static_cast<int32_t>(s));
        q.qo_tile_indices.push_back(static_cast<int32_t>(t));
      }
    }
    q.qo_indptr.push_back(to_i32(in.query_start_loc[s + 1], "query rows"));
    q.kv_indptr.push_back(to_i32(static_cast<int64_t>(q.kv_indices.size()), "pages"));
    q.kv_last_page_len.push_back(last_page);
    q.row_is_prefill.resize(static_cast<size_t>(q.qo_indptr.back()), mine ? 1 : 0);
  }
  return q;
}

}  // namespace octet::cuda_kernels
