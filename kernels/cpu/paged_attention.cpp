// Paged KV cache: writes (reshape_and_cache), the paged attention driver and its reference.
//
// Attention is split flash-decoding style (Dao et al. 2023, "Flash-Decoding for long-context
// inference"; vLLM's paged_attention_v2): the visible positions of a query are cut at fixed
// partition boundaries (multiples of kPartitionTokens, paged_attention_kernel.h), a kernel
// computes for each partition an exact two-pass softmax (max, exp, sum, weighted sum of V), and
// the partials are folded in partition order. Whether the partitions of a query run in one
// work item or spread over threads and are folded afterwards, the same fold runs on the same
// partials, so the result is bitwise the same whatever the batch and the thread count.
#include "kernels/common/check.h"
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>


#include "kernels/cpu/fp8.h"
#include "kernels/common/half.h"
#include "kernels/cpu/ops_ref.h"
#include "kernels/cpu/paged_attention_kernel.h"
#include "kernels/cpu/thread_team.h"

namespace octet {

namespace {

using paged_detail::kGroupLanes;
using paged_detail::kPartitionTokens;
using paged_detail::padded_head_dim;

void check(bool ok, const char* function, const char* what) {
  OCTET_CHECK(ok, "octet: ", function, ": ", what);
}

void check_cache(const KVCacheView& c, const char* function) {
  check(c.k != nullptr && c.v != nullptr, function, "null cache");
  check(c.num_blocks > 0 && c.block_size > 0 && c.num_kv_heads > 0 && c.head_dim > 0, function,
        "cache dimensions must be positive");
  if (!dtype_is_fp8(c.dtype)) return;
  check((c.k_token_scale == nullptr) == (c.v_token_scale == nullptr), function,
        "per-token-head cache with only one of k_token_scale / v_token_scale");
  if (c.k_token_scale) {
    check(c.dtype == DType::FP8_E4M3, function, "per-token-head scales need dtype fp8_e4m3");
    return;
  }
  check(c.k_scale != nullptr && c.v_scale != nullptr, function, "FP8 cache without scales");
  for (int64_t h = 0; h < c.num_kv_heads; ++h)
    check(std::isfinite(c.k_scale[h]) && c.k_scale[h] > 0 && std::isfinite(c.v_scale[h]) &&
              c.v_scale[h] > 0,
          function, "FP8 scales must be finite and positive");
}

// Positions a query may see, and where it is.
struct Row {
  int64_t seq;
  int64_t lo, hi;  // visible positions [lo, hi): hi = position + 1
};

std::vector<Row> query_rows(const KVCacheView& c, const PagedAttentionBatch& b,
                            int64_t sliding_window, const char* function) {
  check(b.num_seqs >= 0 && sliding_window >= 0, function, "negative num_seqs or window");
  if (b.num_seqs == 0) return {};
  check(b.query_start_loc && b.seq_lens && b.block_tables, function, "null batch array");
  check(b.query_start_loc[0] == 0, function, "query_start_loc[0] must be 0");
  std::vector<Row> rows;
  rows.reserve(static_cast<size_t>(b.query_start_loc[b.num_seqs]));
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const int64_t nq = b.query_start_loc[s + 1] - b.query_start_loc[s];
    const int64_t len = b.seq_lens[s];
    check(nq >= 0 && len >= nq, function, "seq_lens[s] < number of queries of s");
    check(len <= b.max_blocks_per_seq * c.block_size, function, "seq_lens beyond block table");
    const int32_t* table = b.block_tables + s * b.max_blocks_per_seq;
    if (nq > 0)
      for (int64_t i = 0; i < (len + c.block_size - 1) / c.block_size; ++i)
        check(table[i] >= 0 && table[i] < c.num_blocks, function, "block id out of range");
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t pos = len - nq + i;
      const int64_t lo = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
      rows.push_back({s, lo, pos + 1});
    }
  }
  return rows;
}

// The fastest kernel this CPU runs for this head size.
// F32 caches (calibration and one-sequence runs) take the AVX2 or the portable kernel.
paged_detail::Kernel best_kernel(int64_t head_dim, DType dtype) {
  using namespace paged_detail;
  static const bool avx512 = avx512_kernel_available(), avx2 = avx2_kernel_available();
  if (dtype == DType::F32) return avx2 ? avx2_kernel() : scalar_kernel();
  if (avx512 && head_dim <= avx512_kernel().max_head_dim) return avx512_kernel();
  return avx2 ? avx2_kernel() : scalar_kernel();
}

// Folds partial (m, l, acc) of the next partition into the running (M, L, A), in place:
// M' = max(M, m), L' = L e^(M-M') + l e^(m-M'), A' = A e^(M-M') + acc e^(m-M').
// One function for every path and split, so the fold's rounding never depends on either.
__attribute__((noinline)) void fold(float* M, float* L, float* A, const float* m, const float* l,
                                    const float* acc, int64_t num_q_heads, int64_t hdp) {
  for (int64_t g = 0; g < num_q_heads; ++g) {
    const float mx = std::max(M[g], m[g]);
    const float a = std::exp(M[g] - mx), b = std::exp(m[g] - mx);
    M[g] = mx;
    L[g] = L[g] * a + l[g] * b;
    float* Ag = A + g * hdp;
    const float* accg = acc + g * hdp;
    for (int64_t d = 0; d < hdp; ++d) Ag[d] = Ag[d] * a + accg[d] * b;
  }
}

// Everything one call needs to prepare a query and finish an output, per KV head.
struct Context {
  const KVCacheView& c;
  const float* q;
  const PagedAttentionBatch& b;
  const std::vector<Row>& rows;
  int64_t num_heads, group, hdp;
  float softmax_scale;
  float* out;
  paged_detail::Kernel kernel;

  // qp: [group, hdp] <- the query heads of (row, kvh), scaled, in the kernel's lane order.
  void prepare_q(int64_t r, int64_t kvh, float* qp) const {
    const int64_t hd = c.head_dim;
    const uint8_t* order = kernel.lane_order(c.dtype);
    const float s = softmax_scale * (dtype_is_fp8(c.dtype) ? c.k_scale[kvh] : 1.0f);
    for (int64_t g = 0; g < group; ++g) {
      const float* qh = q + (r * num_heads + kvh * group + g) * hd;
      for (int64_t base = 0; base < hdp; base += kGroupLanes)
        for (int64_t j = 0; j < kGroupLanes; ++j) {
          const int64_t e = base + order[j];
          qp[g * hdp + base + j] = e < hd ? qh[e] * s : 0.0f;
        }
    }
  }

  // heads: KV heads kvh .. kvh + heads - 1 in one kernel call (qp holds all of them).
  paged_detail::PartialArgs args(int64_t r, int64_t kvh, const float* qp, int64_t begin,
                                 int64_t end, int64_t heads) const {
    const int64_t bytes = dtype_bytes(c.dtype);
    const int64_t head_offset = kvh * c.head_dim * bytes;
    return {c.dtype,
            static_cast<const uint8_t*>(c.k) + head_offset,
            static_cast<const uint8_t*>(c.v) + head_offset,
            c.num_kv_heads * c.head_dim * bytes,
            c.block_size,
            b.block_tables + rows[r].seq * b.max_blocks_per_seq,
            c.head_dim,
            group,
            qp,
            begin,
            end,
            heads};
  }

  // out[row, heads of kvh] <- A / L * v_scale, back in element order.
  void finish(int64_t r, int64_t kvh, const float* L, const float* A) const {
    const int64_t hd = c.head_dim;
    const uint8_t* order = kernel.lane_order(c.dtype);
    const float vs = dtype_is_fp8(c.dtype) ? c.v_scale[kvh] : 1.0f;
    for (int64_t g = 0; g < group; ++g) {
      const float f = vs / L[g];
      float* oh = out + (r * num_heads + kvh * group + g) * hd;
      for (int64_t base = 0; base < hdp; base += kGroupLanes)
        for (int64_t j = 0; j < kGroupLanes; ++j) {
          const int64_t e = base + order[j];
          if (e < hd) oh[e] = A[g * hdp + base + j] * f;
        }
    }
  }
};

int64_t first_partition(const Row& row) { return row.lo / kPartitionTokens; }
int64_t num_partitions(const Row& row) {
  return (row.hi - 1) / kPartitionTokens - first_partition(row) + 1;
}
// Positions of partition j (absolute index) of a row.
void partition_range(const Row& row, int64_t j, int64_t* begin, int64_t* end) {
  *begin = std::max(row.lo, j * kPartitionTokens);
  *end = std::min(row.hi, (j + 1) * kPartitionTokens);
}

// Per-thread buffers of one call; q and the running (M, L, A) for every KV head of a row; m, l,
// acc: one kernel call's partials (up to `heads` KV heads).
// Row blocks (rows > 1): their queries and running (M, L, A) for one KV head, [rows][group].
struct Scratch {
  int64_t group, hdp;
  std::vector<float> qp, work, m, l, acc, M, L, A, rows_q, rows_M, rows_L, rows_A;
  Scratch(int64_t nkv, int64_t group_, int64_t hdp_, int64_t heads, int64_t rows = 1)
      : group(group_), hdp(hdp_), qp(nkv * group * hdp),
        work(paged_detail::partial_scratch_floats(std::max(heads, rows) * group, hdp)),
        m(std::max(heads, rows) * group), l(m.size()), acc(m.size() * hdp), M(nkv * group),
        L(nkv * group), A(nkv * group * hdp), rows_q(rows * group * hdp), rows_M(rows * group),
        rows_L(rows * group), rows_A(rows * group * hdp) {}
  float* q(int64_t kvh) { return qp.data() + kvh * group * hdp; }
  float* Mh(int64_t kvh) { return M.data() + kvh * group; }
  float* Lh(int64_t kvh) { return L.data() + kvh * group; }
  float* Ah(int64_t kvh) { return A.data() + kvh * group * hdp; }
};

// A work item covers KV heads [kvh_lo, kvh_hi) of one query row: all of them (so a thread
// reads whole cache slots, not a third of each), or a run of them when there are fewer items
// than twice the threads (batch-1 decode: one row of one partition would run on one thread);
// either all its partitions, folded in the item, or one partition of a split row, whose
// partials are kept and folded after all items ran. A kernel call takes up to
// Kernel::max_kv_heads adjacent heads. Each (row, KV head) is computed the same way whichever
// item and call hold it.
struct Item {
  int64_t row;
  int64_t j;     // partition index (absolute) for a split row; -1: the whole row
  int64_t slot;  // split rows: index of the kept partial
  int64_t kvh_lo = 0, kvh_hi = 0;
  int64_t rows = 1;  // whole rows row .. row + rows - 1 in one kernel call per partition
};

// Whole-row items of consecutive rows of one sequence that start at the same position and
// span the same partitions (a prefill chunk's rows), merged max_rows at a time: the kernel reads
// their K and V rows once (Kernel::max_query_vectors).
std::vector<Item> row_blocks(const std::vector<Item>& items, const std::vector<Row>& rows,
                             int64_t max_rows) {
  std::vector<Item> out;
  for (const Item& it : items) {
    if (!out.empty() && it.j < 0 && out.back().j < 0 && out.back().rows < max_rows &&
        it.kvh_lo == out.back().kvh_lo && it.kvh_hi == out.back().kvh_hi &&
        it.row == out.back().row + out.back().rows) {
      const Row &a = rows[out.back().row], &b = rows[it.row];
      if (a.seq == b.seq && a.lo == b.lo && num_partitions(a) == num_partitions(b)) {
        ++out.back().rows;
        continue;
      }
    }
    out.push_back(it);
  }
  return out;
}

// A row block's rows over KV heads [kvh_lo, kvh_hi): per head, each partition in one kernel call
// for all its rows, folded and finished per row as run() does for a row alone.
void run_rows(const Context& x, const Item& it, Scratch& s) {
  const int64_t G = x.group, hdp = x.hdp, R = it.rows;
  const Row& first = x.rows[it.row];
  const int64_t j0 = first_partition(first), nj = num_partitions(first);
  for (int64_t kvh = it.kvh_lo; kvh < it.kvh_hi; ++kvh) {
    for (int64_t r = 0; r < R; ++r) x.prepare_q(it.row + r, kvh, s.rows_q.data() + r * G * hdp);
    for (int64_t j = j0; j < j0 + nj; ++j) {
      int64_t begin = 0, end = 0, ends[paged_detail::kMaxRowsPerCall];
      for (int64_t r = 0; r < R; ++r) {
        partition_range(x.rows[it.row + r], j, &begin, &ends[r]);
        end = std::max(end, ends[r]);
      }
      paged_detail::PartialArgs a = x.args(it.row, kvh, s.rows_q.data(), begin, end, 1);
      a.num_rows = R;
      a.row_ends = ends;
      const bool first_j = j == j0;
      x.kernel.partial(a, s.work.data(), first_j ? s.rows_M.data() : s.m.data(),
                       first_j ? s.rows_L.data() : s.l.data(),
                       first_j ? s.rows_A.data() : s.acc.data());
      if (!first_j)
        for (int64_t r = 0; r < R; ++r)
          fold(s.rows_M.data() + r * G, s.rows_L.data() + r * G, s.rows_A.data() + r * G * hdp,
               s.m.data() + r * G, s.l.data() + r * G, s.acc.data() + r * G * hdp, G, hdp);
    }
    for (int64_t r = 0; r < R; ++r)
      x.finish(it.row + r, kvh, s.rows_L.data() + r * G, s.rows_A.data() + r * G * hdp);
  }
}

void run(const Context& x) {
  const int64_t nkv = x.c.num_kv_heads, group = x.group, hdp = x.hdp;
  const int64_t num_rows = static_cast<int64_t>(x.rows.size());
  if (num_rows == 0) return;
  const int64_t threads = cpu::parallel_width();
  const int64_t call_heads = std::clamp<int64_t>(x.kernel.max_kv_heads, 1, nkv);

  // Split a row when it holds more than 1/(8 threads) of all partitions, so that a few long
  // decodes (or one long one beside many short queries) spread over the threads. Results do not
  // depend on this choice: the same partials are folded in the same order either way.
  int64_t total = 0;
  for (const Row& row : x.rows) total += num_partitions(row);
  std::vector<Item> items;
  std::vector<int64_t> split_rows, first_slot;  // per split row: its first kept partial
  int64_t slots = 0;
  for (int64_t r = 0; r < num_rows; ++r) {
    const Row& row = x.rows[r];
    const int64_t nj = num_partitions(row);
    if (nj > 1 && nj * 8 * threads > total) {
      split_rows.push_back(r);
      first_slot.push_back(slots);
      for (int64_t j = first_partition(row); j < first_partition(row) + nj; ++j)
        items.push_back({r, j, slots++});
    } else {
      items.push_back({r, -1, -1});
    }
  }
  first_slot.push_back(slots);
  const int64_t num_whole = static_cast<int64_t>(items.size());
  if (num_whole < 2 * threads && nkv > 1) {
    // Runs of KV heads: enough items for 2 per thread.
    const int64_t runs = std::min(nkv, (2 * threads + num_whole - 1) / num_whole);
    std::vector<Item> per_run;
    for (const Item& it : items)
      for (int64_t u = 0; u < runs; ++u)
        per_run.push_back({it.row, it.j, it.slot, u * nkv / runs, (u + 1) * nkv / runs});
    items.swap(per_run);
  } else {
    for (Item& it : items) it.kvh_hi = nkv;
  }
  // Query rows per kernel call: as many as fit the kernel's query vectors with their group.
  const int64_t max_rows = std::clamp<int64_t>(x.kernel.max_query_vectors / group, 1,
                                               paged_detail::kMaxRowsPerCall);
  if (max_rows > 1) items = row_blocks(items, x.rows, max_rows);
  // Kept partials: [slot, kvh, group] for m and l, [slot, kvh, group, hdp] for acc.
  const int64_t per_slot = nkv * group;
  std::vector<float> pm(slots * per_slot), pl(slots * per_slot), pacc(slots * per_slot * hdp);
  const int64_t num_items = static_cast<int64_t>(items.size());

  cpu::parallel_for(0, num_items, [&](int64_t lo, int64_t hi) {
    Scratch s(nkv, group, hdp, call_heads, max_rows);
    for (int64_t i = lo; i < hi; ++i) {
      const Item& it = items[i];
      if (it.rows > 1) {
        run_rows(x, it, s);
        continue;
      }
      const Row& row = x.rows[it.row];
      for (int64_t kvh = it.kvh_lo; kvh < it.kvh_hi; ++kvh) x.prepare_q(it.row, kvh, s.q(kvh));
      int64_t begin, end;
      if (it.j >= 0) {
        partition_range(row, it.j, &begin, &end);
        for (int64_t kvh = it.kvh_lo; kvh < it.kvh_hi; kvh += call_heads) {
          const int64_t heads = std::min(call_heads, it.kvh_hi - kvh);
          const int64_t o = it.slot * per_slot + kvh * group;
          x.kernel.partial(x.args(it.row, kvh, s.q(kvh), begin, end, heads), s.work.data(),
                           &pm[o], &pl[o], &pacc[o * hdp]);
        }
        continue;
      }
      const int64_t j0 = first_partition(row), nj = num_partitions(row);
      for (int64_t j = j0; j < j0 + nj; ++j) {
        partition_range(row, j, &begin, &end);
        for (int64_t kvh = it.kvh_lo; kvh < it.kvh_hi; kvh += call_heads) {
          const int64_t heads = std::min(call_heads, it.kvh_hi - kvh);
          const bool first = j == j0;
          x.kernel.partial(x.args(it.row, kvh, s.q(kvh), begin, end, heads), s.work.data(),
                           first ? s.Mh(kvh) : s.m.data(), first ? s.Lh(kvh) : s.l.data(),
                           first ? s.Ah(kvh) : s.acc.data());
          if (!first)
            for (int64_t h = 0; h < heads; ++h)
              fold(s.Mh(kvh + h), s.Lh(kvh + h), s.Ah(kvh + h), s.m.data() + h * group,
                   s.l.data() + h * group, s.acc.data() + h * group * hdp, group, hdp);
        }
      }
      for (int64_t kvh = it.kvh_lo; kvh < it.kvh_hi; ++kvh)
        x.finish(it.row, kvh, s.Lh(kvh), s.Ah(kvh));
    }
  }, threads > 1);
  // Split rows: fold the kept partials of each (row, KV head) in partition order.
  const int64_t split_units = static_cast<int64_t>(split_rows.size()) * nkv;
  cpu::parallel_for(0, split_units, [&](int64_t lo, int64_t hi) {
    Scratch s(nkv, group, hdp, 1);
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t k = u / nkv, kvh = u % nkv, r = split_rows[k];
      auto at = [&](int64_t slot) { return slot * per_slot + kvh * group; };
      const int64_t o0 = at(first_slot[k]);
      std::copy_n(&pm[o0], group, s.Mh(0));
      std::copy_n(&pl[o0], group, s.Lh(0));
      std::copy_n(&pacc[o0 * hdp], group * hdp, s.Ah(0));
      for (int64_t slot = first_slot[k] + 1; slot < first_slot[k + 1]; ++slot)
        fold(s.Mh(0), s.Lh(0), s.Ah(0), &pm[at(slot)], &pl[at(slot)], &pacc[at(slot) * hdp],
             group, hdp);
      x.finish(r, kvh, s.Lh(0), s.Ah(0));
    }
  }, threads > 1);
}

// E4M3 code -> float (scale 1), for the per-token-head path.
const float* e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = fp8_e4m3_to_float(static_cast<uint8_t>(i));
    return a;
  }();
  return t.data();
}

// Attention over a per-token-head FP8 cache (KVCacheView::k_token_scale): each (query row, KV
// head) is one work item that runs its visible positions in order, two passes (scores, max;
// then exp, sum and the weighted sum of V), so its result depends on that query and its cached
// K/V alone, never on the batch or the threads. score_t = softmax_scale * k_scale_t *
// sum_d q_d code(k_t,d); out = sum_t p_t v_scale_t code(v_t) / sum_t p_t, all FP32.
void per_token_head_attention(const KVCacheView& c, const float* q, const PagedAttentionBatch& b,
                              const std::vector<Row>& rows, int64_t num_heads,
                              float softmax_scale, float* out) {
  const int64_t nkv = c.num_kv_heads, hd = c.head_dim, group = num_heads / nkv;
  const int64_t num_units = static_cast<int64_t>(rows.size()) * nkv;
  const float* lut = e4m3_table();
  const auto* kc = static_cast<const uint8_t*>(c.k);
  const auto* vc = static_cast<const uint8_t*>(c.v);
  cpu::parallel_for(0, num_units, [&](int64_t lo, int64_t hi) {
    std::vector<float> scores, acc(static_cast<size_t>(hd)), krow(static_cast<size_t>(hd));
    std::vector<int64_t> slots;
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t r = u / nkv, kvh = u % nkv;
      const Row& row = rows[r];
      const int32_t* table = b.block_tables + row.seq * b.max_blocks_per_seq;
      const int64_t n = row.hi - row.lo;
      slots.resize(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = row.lo + t;
        slots[t] = static_cast<int64_t>(table[pos / c.block_size]) * c.block_size +
                   pos % c.block_size;
      }
      scores.resize(static_cast<size_t>(n));
      for (int64_t g = 0; g < group; ++g) {
        const int64_t head = kvh * group + g;
        const float* qh = q + (r * num_heads + head) * hd;
        float mx = -INFINITY;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t sh = slots[t] * nkv + kvh;
          const uint8_t* k = kc + sh * hd;
          float dot = 0.0f;
          for (int64_t d = 0; d < hd; ++d) dot += qh[d] * lut[k[d]];
          scores[t] = dot * (softmax_scale * c.k_token_scale[sh]);
          mx = std::max(mx, scores[t]);
        }
        float sum = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t t = 0; t < n; ++t) {
          const int64_t sh = slots[t] * nkv + kvh;
          const float p = std::exp(scores[t] - mx);
          sum += p;
          const float w = p * c.v_token_scale[sh];
          const uint8_t* v = vc + sh * hd;
          for (int64_t d = 0; d < hd; ++d) acc[d] += w * lut[v[d]];
        }
        float* oh = out + (r * num_heads + head) * hd;
        for (int64_t d = 0; d < hd; ++d) oh[d] = acc[d] / sum;
      }
    }
  }, num_units > 1);
}

}  // namespace

void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t n) {
  constexpr const char* kFn = "write_kv_cache";
  check(n >= 0, kFn, "negative token count");
  if (n == 0) return;
  check_cache(cache, kFn);
  check(k && v && slot_mapping, kFn, "null input");
  const int64_t nkv = cache.num_kv_heads, hd = cache.head_dim;
  const int64_t row = nkv * hd, bytes = dtype_bytes(cache.dtype);
  const int64_t num_slots = cache.num_blocks * cache.block_size;
  for (int64_t i = 0; i < n; ++i) check(slot_mapping[i] < num_slots, kFn, "slot out of range");
  const DType format =
      cache.dtype == DType::FP8_E5M2 ? DType::FP8_E5M2 : DType::FP8_E4M3;
  cpu::parallel_for(0, n, [&](int64_t i_lo, int64_t i_hi) {
    std::vector<float> scaled(static_cast<size_t>(hd));
    for (int64_t i = i_lo; i < i_hi; ++i) {
      const int64_t slot = slot_mapping[i];
      if (slot < 0) continue;  // padding token: nothing to store
      for (int which = 0; which < 2; ++which) {
        const float* src = (which == 0 ? k : v) + i * row;
        uint8_t* dst = static_cast<uint8_t*>(which == 0 ? cache.k : cache.v) + slot * row * bytes;
        const float* scale = which == 0 ? cache.k_scale : cache.v_scale;
        float* token_scale = which == 0 ? cache.k_token_scale : cache.v_token_scale;
        for (int64_t h = 0; h < nkv; ++h) {
          if (token_scale) {  // per-token-head: this row's own scale, amax / 448
            const float* x = src + h * hd;
            float amax = 0.0f;
            for (int64_t d = 0; d < hd; ++d) amax = std::fmax(amax, std::fabs(x[d]));
            float s = amax / 448.0f;
            if (!(s >= FLT_MIN) || !std::isfinite(s)) s = 1.0f;  // all zero (or NaN/inf row)
            token_scale[slot * nkv + h] = s;
            for (int64_t d = 0; d < hd; ++d) scaled[d] = x[d] / s;  // true division
            fp8_encode(DType::FP8_E4M3, scaled.data(), dst + h * hd * bytes,
                       static_cast<size_t>(hd));
            continue;
          }
          const float* x = src + h * hd;
          uint8_t* y = dst + h * hd * bytes;
          switch (cache.dtype) {
            case DType::F32: std::memcpy(y, x, 4 * hd); break;
            case DType::BF16:
              for (int64_t d = 0; d < hd; ++d) {
                const uint16_t b = float_to_bf16(x[d]);
                std::memcpy(y + 2 * d, &b, 2);
              }
              break;
            case DType::F16:
              for (int64_t d = 0; d < hd; ++d) {
                const uint16_t b = float_to_fp16(x[d]);
                std::memcpy(y + 2 * d, &b, 2);
              }
              break;
            case DType::FP8_E4M3:
            case DType::FP8_E5M2:
              for (int64_t d = 0; d < hd; ++d) scaled[d] = x[d] / scale[h];  // true division
              fp8_encode(format, scaled.data(), y, static_cast<size_t>(hd));
              break;
          }
        }
      }
    }
  }, n * row >= (1 << 15));
}

namespace paged_detail {

void paged_attention_with(const Kernel& kernel, const KVCacheView& cache, const float* q,
                          const PagedAttentionBatch& batch, int64_t num_heads,
                          int64_t sliding_window, float softmax_scale, float* out) {
  constexpr const char* kFn = "paged_attention";
  const std::vector<Row> rows = query_rows(cache, batch, sliding_window, kFn);
  if (rows.empty()) return;
  check_cache(cache, kFn);
  check(q && out, kFn, "null q or out");
  check(num_heads > 0 && num_heads % cache.num_kv_heads == 0, kFn,
        "num_heads must be a positive multiple of num_kv_heads");
  if (cache.k_token_scale) {
    per_token_head_attention(cache, q, batch, rows, num_heads, softmax_scale, out);
    return;
  }
  check(cache.head_dim <= kernel.max_head_dim, kFn, "head_dim too large for this kernel");
  const Context x{cache,
                  q,
                  batch,
                  rows,
                  num_heads,
                  num_heads / cache.num_kv_heads,
                  padded_head_dim(cache.head_dim),
                  softmax_scale,
                  out,
                  kernel};
  run(x);
}

}  // namespace paged_detail

void paged_attention(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
                     int64_t num_heads, int64_t sliding_window, float softmax_scale, float* out) {
  paged_detail::paged_attention_with(best_kernel(cache.head_dim, cache.dtype), cache, q, batch,
                                     num_heads, sliding_window, softmax_scale, out);
}

namespace ref {

void paged_attention(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
                     int64_t num_heads, int64_t sliding_window, float softmax_scale, float* out) {
  constexpr const char* kFn = "ref::paged_attention";
  const std::vector<Row> rows = query_rows(cache, batch, sliding_window, kFn);
  if (rows.empty()) return;
  check_cache(cache, kFn);
  check(q && out && num_heads > 0 && num_heads % cache.num_kv_heads == 0, kFn, "bad arguments");
  const int64_t nkv = cache.num_kv_heads, hd = cache.head_dim, row = nkv * hd;
  const int64_t bytes = dtype_bytes(cache.dtype);
  // The dequantized value of element i of slot `slot` of cache `base`, scale per KV head.
  auto value = [&](const void* base, const float* scale, const float* token_scale, int64_t slot,
                   int64_t i) -> float {
    const uint8_t* p = static_cast<const uint8_t*>(base) + (slot * row + i) * bytes;
    if (token_scale) return fp8_e4m3_to_float(*p) * token_scale[slot * nkv + i / hd];
    uint16_t h;
    switch (cache.dtype) {
      case DType::F32: { float f; std::memcpy(&f, p, 4); return f; }
      case DType::BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
      case DType::F16: std::memcpy(&h, p, 2); return fp16_to_float(h);
      case DType::FP8_E4M3: return fp8_e4m3_to_float(*p) * scale[i / hd];
      case DType::FP8_E5M2: return fp8_e5m2_to_float(*p) * scale[i / hd];
    }
    return 0.0f;
  };
  std::vector<float> k, v;
  for (int64_t s = 0; s < batch.num_seqs; ++s) {
    // The whole sequence, positions 0 .. seq_len - 1, as [seq_len, nkv, hd] FP32.
    const int64_t len = batch.seq_lens[s];
    const int32_t* table = batch.block_tables + s * batch.max_blocks_per_seq;
    k.resize(static_cast<size_t>(len * row));
    v.resize(static_cast<size_t>(len * row));
    for (int64_t pos = 0; pos < len; ++pos) {
      const int64_t slot = table[pos / cache.block_size] * cache.block_size + pos % cache.block_size;
      for (int64_t i = 0; i < row; ++i) {
        k[pos * row + i] = value(cache.k, cache.k_scale, cache.k_token_scale, slot, i);
        v[pos * row + i] = value(cache.v, cache.v_scale, cache.v_token_scale, slot, i);
      }
    }
    for (int64_t r = batch.query_start_loc[s]; r < batch.query_start_loc[s + 1]; ++r) {
      const Row& qr = rows[r];
      ref::attention(q + r * num_heads * hd, k.data() + qr.lo * row, v.data() + qr.lo * row,
                     out + r * num_heads * hd, num_heads, nkv, hd, qr.hi - qr.lo, softmax_scale);
    }
  }
}

}  // namespace ref

}  // namespace octet
