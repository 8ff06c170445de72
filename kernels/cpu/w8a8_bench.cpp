// The kernel benchmark (see w8a8_bench.h). Timings are the best of several timed batches, each
// long enough (>= 20 ms) for the clock to be meaningless noise.
#include "kernels/cpu/w8a8_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_team.h"
#include "kernels/cpu/w8a8.h"

namespace octet {

namespace {

using Clock = std::chrono::steady_clock;

// Best seconds per call of fn(i) over batches of calls; i counts calls (to rotate buffers).
template <typename Fn>
double best_seconds_per_call(Fn&& fn) {
  int64_t calls = 0;
  fn(calls++);  // warm-up (page faults, thread pool)
  int64_t batch = 1;
  double best = 1e30;
  const auto start = Clock::now();
  for (int rep = 0; rep < 5 || std::chrono::duration<double>(Clock::now() - start).count() < 0.15;
       ++rep) {
    const auto t0 = Clock::now();
    for (int64_t b = 0; b < batch; ++b) fn(calls++);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, dt / static_cast<double>(batch));
    if (dt < 0.02) batch *= 2;
    if (rep > 200) break;
  }
  return best;
}

struct Shape {
  const char* name;
  int64_t n, k;
  int per_layer;  // how many times SmolLM2's layer runs this shape (0: once per token)
};

// Weight copies: enough that cycling through them exceeds the caches (>= 256 MiB, >= 2 copies).
int64_t copies_for(int64_t bytes) {
  return std::max<int64_t>(2, ((256ll << 20) + bytes - 1) / bytes);
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0, double e = 0,
                double g = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b, c, d, e, g);
  return buf;
}

}  // namespace

// The first "cpu MHz" of /proc/cpuinfo in GHz (the clock the kernel reports; 0 if none).
double cpu_clock_ghz() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("cpu MHz", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return std::atof(line.c_str() + colon + 1) / 1000.0;
    }
  return 0.0;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
namespace {
// iters x 16 independent VDPBF16PS chains (enough to cover the latency of 2 pipes), returns a
// value that depends on every chain so that none is optimised away.
__attribute__((target("avx512f,avx512bf16"), noinline)) float bf16_dot_chains(int64_t iters) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i));
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3c00);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
    asm volatile("" : "+v"(x));  // a new x each time round: no chain is hoisted
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);  // not _mm512_reduce_add_ps: GCC 12 warns on its undefined source
  float total = 0;
  for (float l : lanes) total += l;
  return total;
}
}  // namespace

double measure_bf16_dot_peak_gfs() {
  if (!w8a8_avx512_available()) return 0.0;
  const int threads = cpu::parallel_width();
  constexpr int64_t kIters = 2000000;  // 32M instructions per thread: ~5-20 ms
  double best = 1e30;
  std::vector<float> sink(static_cast<size_t>(threads));  // one slot per piece: no shared write
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    cpu::parallel_for(0, threads, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) sink[static_cast<size_t>(t)] += bf16_dot_chains(kIters);
    }, true, threads);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  volatile float keep = sink[0];  // the sums are used: the chains cannot be dropped
  (void)keep;
  return threads * static_cast<double>(kIters) * 16 * 64 / best / 1e9;
}
#else
double measure_bf16_dot_peak_gfs() { return 0.0; }
#endif

namespace {

// XOR of [p, p + bytes) (bytes a multiple of 128): four independent 32-byte load chains, so
// only the loads limit it; the scalar fallback reads 8 bytes at a time.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) uint64_t xor_read_avx2(const uint8_t* p, int64_t bytes) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (int64_t i = 0; i < bytes; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return static_cast<uint64_t>(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}
#endif

uint64_t xor_read(const uint8_t* p, int64_t bytes) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2")) return xor_read_avx2(p, bytes);
#endif
  uint64_t acc[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < bytes; i += 32)
    for (int j = 0; j < 4; ++j) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      acc[j] ^= v;
    }
  return acc[0] ^ acc[1] ^ acc[2] ^ acc[3];
}

}  // namespace

// Read bandwidth in GB/s: a 256 MiB buffer read by the kernels' thread team (each thread one
// contiguous part, 32-byte loads where the CPU has AVX2), best of 10.
double measure_read_bandwidth_gbs() {
  constexpr int64_t kBytes = 256ll << 20, kPiece = 1 << 20;
  const std::unique_ptr<uint8_t[]> buf(new uint8_t[static_cast<size_t>(kBytes) + 64]);
  uint8_t* p = buf.get() + (64 - reinterpret_cast<uintptr_t>(buf.get()) % 64) % 64;
  const int threads = cpu::parallel_width();
  cpu::parallel_for(0, kBytes / kPiece, [&](int64_t lo, int64_t hi) {  // first touch, parallel
    std::memset(p + lo * kPiece, 1, static_cast<size_t>((hi - lo) * kPiece));
  }, true, threads);
  std::vector<uint64_t> sink(static_cast<size_t>(kBytes / kPiece), 0);  // one slot per piece
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = Clock::now();
    cpu::parallel_for(0, kBytes / kPiece, [&](int64_t lo, int64_t hi) {
      sink[static_cast<size_t>(lo)] ^= xor_read(p + lo * kPiece, (hi - lo) * kPiece);
    }, true, threads);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  volatile uint64_t keep = sink[0];  // the reads are used: they cannot be dropped
  (void)keep;
  return static_cast<double>(kBytes) / best / 1e9;
}


std::string run_kernel_benchmark(int64_t m_max) {
  m_max = std::max<int64_t>(m_max, 2);
  // Batch sizes: 1 (decode of one sequence), 4 / 16 / 64 (one decode step of that many
  // sequences), m_max (a prefill chunk). Batches below m_max cycle through weight copies
  // (weights come from DRAM, as in a decode step); m_max reuses copy 0 (compute-bound).
  std::vector<int64_t> ms{1};
  for (int64_t m : {int64_t{4}, int64_t{16}, int64_t{64}})
    if (m < m_max) ms.push_back(m);
  ms.push_back(m_max);
  // SmolLM2-135M: hidden 576, 9 heads x 64 (q, o: 576x576), 3 KV heads (k, v: 192x576),
  // intermediate 1536 (gate, up: 1536x576; down: 576x1536), 30 layers, vocab 49152 (lm_head).
  const Shape shapes[] = {{"q/o_proj  576->576", 576, 576, 2},
                          {"k/v_proj  576->192", 192, 576, 2},
                          {"gate/up   576->1536", 1536, 576, 2},
                          {"down     1536->576", 576, 1536, 1},
                          {"lm_head   576->49152", 49152, 576, 0}};
  constexpr int kLayers = 30;
  const bool avx512 = w8a8_avx512_available(), avx2 = fp8_avx2_available();
  std::string out;
  const int threads = cpu::parallel_width();
  const double ghz = cpu_clock_ghz();
  // VDPBF16PS on 512 bits: 16 FP32 lanes, each adds 2 BF16 products = 32 multiply-adds
  // (64 FLOP as GF/s = 2 m n k / time counts them), taken as 1 instruction per cycle per core.
  const double stated_gfs = threads * ghz * 64.0;
  // Some cores run two VDPBF16PS per cycle (Zen 5) or above the reported clock: measured too.
  const double measured_gfs = avx512 ? measure_bf16_dot_peak_gfs() : 0.0;
  const double peak_gfs = std::max(stated_gfs, measured_gfs);
  out += "octet kernel benchmark: " + std::to_string(threads) + " threads, " +
         (avx2 ? "AVX2+FMA+F16C" : "scalar (no AVX2)") +
         (avx512 ? "; FP8 W8A8: AVX-512 VBMI+BF16 (AVX2 column: the AVX2 path)" : "") + "\n";
  const double bw = measure_read_bandwidth_gbs();
  out += fmt("memory read bandwidth (256 MiB, 2 threads): %.1f GB/s\n", bw);
  // fmt's arguments are doubles: %.0f for the thread count (a %d would read a wrong register).
  out += fmt("AVX-512 BF16 peak (stated): %.0f cores x %.2f GHz (/proc/cpuinfo) x 32 multiply-adds"
             " (one 512-bit VDPBF16PS) per cycle = %.0f GF/s at 2 FLOP per multiply-add\n",
             threads, ghz, stated_gfs);
  if (measured_gfs > 0)
    out += fmt("AVX-512 BF16 peak (measured): %.0f GF/s (%.0f threads x 16 independent VDPBF16PS"
               " chains, best of 3; %.2fx the stated one); the shares below are of the higher\n",
               measured_gfs, threads, stated_gfs > 0 ? measured_gfs / stated_gfs : 0.0);
  out += "\n";
  out += "shape                  m   FP32 us   BF16 us    FP8 us  FP8/FP32  FP8 AVX2 us  "
         "FP8 tok/s  FP8 x(m=1)  FP8 GB/s | GF/s\n";
  const size_t nm = ms.size();
  // Per batch size: one step's time of all SmolLM2 linears, FP32 model and FP8 model (FP8
  // linears + BF16 lm_head, what --quantization fp8 runs).
  std::vector<double> step_f32(nm, 0.0), step_fp8(nm, 0.0);
  for (const Shape& s : shapes) {
    const int64_t n = s.n, k = s.k;
    std::vector<float> x(static_cast<size_t>(m_max * k));
    for (int64_t i = 0; i < m_max * k; ++i) x[i] = static_cast<float>((i * 13) % 11 - 5) * 0.1f;
    std::vector<float> y(static_cast<size_t>(m_max * n));
    std::vector<double> t32(nm), t16(nm), t8(nm), t8_avx2(nm, 0.0);
    {  // FP32 weights: small deterministic values
      const int64_t c32 = copies_for(n * k * 4);
      std::vector<float> w32(static_cast<size_t>(c32 * n * k));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < c32 * n * k; ++i)
        w32[i] = static_cast<float>((i * 37) % 17 - 8) * 0.01f;
      for (size_t q = 0; q < nm; ++q) {
        const int64_t m = ms[q];
        t32[q] = best_seconds_per_call([&](int64_t i) {
          const int64_t c = m < m_max ? i % c32 : 0;
          cpu::linear(x.data(), w32.data() + c * n * k, nullptr, y.data(), m, n, k);
        });
      }
    }
    {  // BF16 weights (the 16-bit lm_head path), in the layout the CPU backend uploads them in
      const int64_t c16 = copies_for(n * k * 2);
      const bool rows8x8 = linear_bf16_preferred_layout() == Bf16Layout::Rows8x8;
      const int64_t per_copy = rows8x8 ? bf16_rows8x8_elements(n, k) : n * k;
      std::vector<uint16_t> w16(static_cast<size_t>(c16 * per_copy));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < c16 * per_copy; ++i)
        w16[i] = static_cast<uint16_t>(0x3C00 + (i * 37) % 0x200);  // ~0.0078 .. 0.03
      for (size_t q = 0; q < nm; ++q) {
        const int64_t m = ms[q];
        t16[q] = best_seconds_per_call([&](int64_t i) {
          const uint16_t* w = w16.data() + (m < m_max ? i % c16 : 0) * per_copy;
          if (rows8x8)
            linear_bf16_rows8x8(x.data(), w, y.data(), m, n, k);
          else
            linear_bf16(x.data(), w, y.data(), m, n, k);
        });
      }
    }
    {  // FP8 codes (no NaN codes); the time includes the per-token activation quantization.
      // Each path reads the layout the engine gives it: linear_w8a8 its preferred one, the
      // AVX2 path (timed on its own on AVX-512 CPUs) Rows8x32.
      const int64_t c8 = copies_for(n * k);
      std::vector<uint8_t> w8(static_cast<size_t>(c8 * n * k));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < c8 * n * k; ++i) w8[i] = static_cast<uint8_t>((i * 37) % 0x7E);
      const auto packed = [&](Fp8Layout layout) {
        const int64_t bytes = fp8_weight_bytes(layout, n, k, 1);
        std::vector<uint8_t> out(static_cast<size_t>(c8 * bytes));
        for (int64_t c = 0; c < c8; ++c)
          pack_fp8_weight(layout, w8.data() + c * n * k, n, k, 1, out.data() + c * bytes);
        return out;
      };
      const Fp8Layout auto_layout = w8a8_preferred_layout();
      const std::vector<uint8_t> w_auto = packed(auto_layout);
      const std::vector<uint8_t> w_avx2 =
          avx512 && avx2 ? packed(Fp8Layout::Rows8x32) : std::vector<uint8_t>{};
      std::vector<float> sw(static_cast<size_t>(n), 0.01f);
      std::vector<uint8_t> qa(x.size());
      std::vector<float> sa(static_cast<size_t>(m_max));
      for (size_t q = 0; q < nm; ++q) {
        const int64_t m = ms[q];
        auto fp8_call = [&](auto linear, const std::vector<uint8_t>& codes, Fp8Layout layout) {
          const int64_t bytes = fp8_weight_bytes(layout, n, k, 1);
          return best_seconds_per_call([&](int64_t i) {
            const int64_t c = m < m_max ? i % c8 : 0;
            quantize_per_token_e4m3(x.data(), m, k, qa.data(), sa.data());
            const Fp8WeightView w{codes.data() + c * bytes, sw.data(), ScaleGranularity::PerRow,
                                  n, k, 1, layout};
            linear(qa.data(), sa.data(), ScaleGranularity::PerRow, w, nullptr, y.data(), m);
          });
        };
        t8[q] = fp8_call(linear_w8a8, w_auto, auto_layout);
        if (avx512 && avx2)
          t8_avx2[q] = fp8_call(linear_w8a8_avx2, w_avx2, Fp8Layout::Rows8x32);
      }
    }
    for (size_t q = 0; q < nm; ++q) {
      const int64_t m = ms[q];
      char head[64];
      std::snprintf(head, sizeof(head), "%-20s %4lld", s.name, static_cast<long long>(m));
      std::string line = head + fmt("  %8.1f  %8.1f  %8.1f  %7.2fx", t32[q] * 1e6, t16[q] * 1e6,
                                    t8[q] * 1e6, t32[q] / t8[q]);
      line += t8_avx2[q] > 0 ? fmt("  %11.1f", t8_avx2[q] * 1e6) : std::string("            -");
      line += fmt("  %9.0f  %9.2fx", static_cast<double>(m) / t8[q], t8[q] / t8[0]);
      const double gfs = 2.0 * static_cast<double>(m * n * k) / t8[q] / 1e9;
      if (m < m_max)  // weight bytes from DRAM per call
        line += fmt("  %6.1f GB/s", static_cast<double>(n * k) / t8[q] / 1e9);
      if (m >= 16 || m == m_max)
        line += fmt(" | %6.1f GF/s (%.0f%% of peak)", gfs,
                    peak_gfs > 0 ? 100 * gfs / peak_gfs : 0.0);
      line += "\n";
      out += line;
      const double times = s.per_layer ? s.per_layer * kLayers : 1;
      step_f32[q] += times * t32[q];
      step_fp8[q] += times * (s.per_layer ? t8[q] : t16[q]);
    }
  }
  out += "\nall SmolLM2-135M linears for one step of m tokens (30 layers + lm_head): FP32 model; "
         "FP8 model (FP8 linears, BF16 lm_head)\n";
  for (size_t q = 0; q < nm; ++q)
    out += fmt("  m = %4.0f: FP32 %7.2f ms (%7.0f tok/s)   FP8 %7.2f ms (%7.0f tok/s, %5.2fx "
               "the m = 1 step)\n",
               static_cast<double>(ms[q]), step_f32[q] * 1e3,
               static_cast<double>(ms[q]) / step_f32[q], step_fp8[q] * 1e3,
               static_cast<double>(ms[q]) / step_fp8[q], step_fp8[q] / step_fp8[0]);
  out += "FP8 times include the per-token activation quantization. m < " +
         std::to_string(m_max) +
         ": weights cycle through >= 256 MiB of copies (from DRAM; GB/s counts FP8 weight "
         "bytes); m = " +
         std::to_string(m_max) + ": one copy (compute-bound). GF/s = 2 m n k / time, for m >= 16 "
         "and m = " + std::to_string(m_max) + ".\n";
  return out;
}

}  // namespace octet
