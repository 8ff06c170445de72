// Internal to kernels/cpu (linear_bf16.cpp and linear_bf16_avx512.cpp only): the tile driver
// of linear_bf16's vector paths, written once over a lane type. The including file defines
// OCTET_BF16_TARGET (its target attribute) and includes this inside its anonymous namespace,
// after widen(); a Lanes type gives Vec, kLanes, kWideOutputs, kGemvOutputs, zero(),
// load_w(bf16 *), load_x(float *), fma(x, w, acc) (acc + x * w) and hsum(Vec) (a fixed tree),
// each with that target attribute.
// Per (row, output): one kLanes-wide FMA chain over the first k & ~(kLanes - 1) elements, hsum,
// then the tail added in order (add_tail): the same arithmetic whatever the tile, m or thread
// count, so every path is batch invariant.

// The tail of one output, added in order after the vector sum. Out of line and without FMA:
// the same roundings for every row, whatever the caller was compiled for.
__attribute__((noinline)) inline float add_tail(float s, const float* x, const uint16_t* w,
                                                int64_t count) {
  for (int64_t t = 0; t < count; ++t) s += x[t] * widen(w[t]);
  return s;
}

// y[i * n + r] for i < MR, r < NR: x rows (stride k) . W rows (stride k); each widened weight
// vector serves MR rows.
template <class Lanes, int MR, int NR>
OCTET_BF16_TARGET inline void tile(const float* x, const uint16_t* w, int64_t k, float* y,
                                   int64_t n) {
  using Vec = typename Lanes::Vec;
  const int64_t kv = k & ~int64_t{Lanes::kLanes - 1};
  Vec acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = Lanes::zero();
  for (int64_t t = 0; t < kv; t += Lanes::kLanes) {
    // A GEMV of NR > 1 interleaved rows (AVX2) streams its weights once: each line of the rows
    // two tiles ahead is prefetched while this tile runs (Zen 3, SmolLM2's 49152 x 576 lm_head
    // from DRAM: 14 -> 18-21 GB/s; the hardware prefetchers lose NR interleaved streams).
    if (MR == 1 && NR > 1 && t % 32 == 0)
      for (int r = 0; r < NR; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + (r + 2 * NR) * k + t), _MM_HINT_T0);
    Vec wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = Lanes::load_w(w + r * k + t);
    for (int i = 0; i < MR; ++i) {
      const Vec xv = Lanes::load_x(x + i * k + t);
      for (int r = 0; r < NR; ++r) acc[i][r] = Lanes::fma(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) {
      const float s = Lanes::hsum(acc[i][r]);
      y[i * n + r] = kv < k ? add_tail(s, x + i * k + kv, w + r * k + kv, k - kv) : s;
    }
}

// Outputs [j0, j1) for MR rows: NR outputs per tile, then the rest one by one.
template <class Lanes, int MR, int NR>
OCTET_BF16_TARGET void block_rows(const float* x, const uint16_t* w, int64_t k, float* y,
                                  int64_t n, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) tile<Lanes, MR, NR>(x, w + j * k, k, y + j, n);
  for (; j < j1; ++j) tile<Lanes, MR, 1>(x, w + j * k, k, y + j, n);
}

// Tiles of MR <= 4 rows over the outputs [j0, j1): Lanes::kWideOutputs per tile for larger
// batches (compute-bound: as many accumulators as the registers hold); for small batches one
// output per tile (each weight row read as one sequential stream, which the hardware
// prefetchers follow: on Zen 5 with AVX-512, interleaved short rows halved the GEMV), except
// Lanes::kGemvOutputs at m = 1 (AVX2 on Zen 3: one 8-lane FMA chain per row is latency-bound,
// 4 rows' chains side by side decoded a 1B model's BF16 lm_head step 13% faster).
template <class Lanes, int MR>
OCTET_BF16_TARGET void rows_tile(bool wide, const float* x, const uint16_t* w, int64_t k,
                                 float* y, int64_t n, int64_t j0, int64_t j1) {
  if (wide) {
    block_rows<Lanes, MR, Lanes::kWideOutputs>(x, w, k, y, n, j0, j1);
  } else if (MR == 1) {
    block_rows<Lanes, MR, Lanes::kGemvOutputs>(x, w, k, y, n, j0, j1);
  } else {
    block_rows<Lanes, MR, 1>(x, w, k, y, n, j0, j1);
  }
}

// Blocks of 48 output rows over threads; in each, tiles of up to 4 rows of x share every
// widened weight vector, and the block's weights (<= ~55 KB at k = 576) stay in L2 while the
// tiles of rows pass. pieces: the thread team's piece count for wide batches (0: its default).
template <class Lanes>
OCTET_BF16_TARGET void linear_bf16_tiles(const float* x, const uint16_t* w, float* y, int64_t m,
                                         int64_t n, int64_t k, bool one_block_per_piece) {
  constexpr int64_t kBlock = 48;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool wide = m > 4;
  cpu::parallel_for_each(0, blocks, [&](int64_t b) {
    const int64_t j0 = b * kBlock, j1 = n < j0 + kBlock ? n : j0 + kBlock;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const float* xi = x + i0 * k;
      float* yi = y + i0 * n;
      switch (m - i0 < 4 ? m - i0 : 4) {
        case 4: rows_tile<Lanes, 4>(wide, xi, w, k, yi, n, j0, j1); break;
        case 3: rows_tile<Lanes, 3>(wide, xi, w, k, yi, n, j0, j1); break;
        case 2: rows_tile<Lanes, 2>(wide, xi, w, k, yi, n, j0, j1); break;
        default: rows_tile<Lanes, 1>(wide, xi, w, k, yi, n, j0, j1); break;
      }
    }
  }, n * k * m > 65536, wide && one_block_per_piece ? blocks : 0);
}
