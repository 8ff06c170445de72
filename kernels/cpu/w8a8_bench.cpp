// The kernel benchmark (see w8a8_bench.h). Timings are the best of several timed batches, each
// long enough (>= 20 ms) for the clock to be meaningless noise.
#include "kernels/cpu/w8a8_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/ops.h"
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

// Read bandwidth in GB/s: a 256 MiB buffer summed as 64-bit integers (an integer sum vectorises
// and has no add-latency chain, so the loads are the limit) by 2 threads, best of 10.
double measure_read_bandwidth_gbs() {
  const size_t n = (256ull << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n);
#pragma omp parallel for num_threads(2) schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = i & 7;
  double best = 1e30;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = Clock::now();
    uint64_t total = 0;
#pragma omp parallel for num_threads(2) schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; ++i) total += buf[i];
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    sink = sink + total;
  }
  return static_cast<double>(n * sizeof(uint64_t)) / best / 1e9;
}


std::string run_kernel_benchmark(int64_t m_max) {
  m_max = std::max<int64_t>(m_max, 2);
  // SmolLM2-135M: hidden 576, 9 heads x 64 (q, o: 576x576), 3 KV heads (k, v: 192x576),
  // intermediate 1536 (gate, up: 1536x576; down: 576x1536), 30 layers, vocab 49152 (lm_head).
  const Shape shapes[] = {{"q/o_proj  576->576", 576, 576, 2},
                          {"k/v_proj  576->192", 192, 576, 2},
                          {"gate/up   576->1536", 1536, 576, 2},
                          {"down     1536->576", 576, 1536, 1},
                          {"lm_head   576->49152", 49152, 576, 0}};
  constexpr int kLayers = 30;
  std::string out;
  out += "octet kernel benchmark: " + std::to_string(omp_get_max_threads()) + " threads, " +
         (fp8_avx2_available() ? "AVX2+FMA+F16C" : "scalar (no AVX2)") +
         (w8a8_avx512_available() ? "; FP8 GEMV (m = 1): AVX-512 VBMI+BF16" : "") + "\n";
  const double bw = measure_read_bandwidth_gbs();
  out += fmt("memory read bandwidth (256 MiB, 2 threads): %.1f GB/s\n\n", bw);
  out += "shape                  m     FP32 us   FP8 us  speedup   FP32       FP8        "
         "FP8 %floor\n";
  double token_f32 = 0, token_fp8 = 0;
  for (const Shape& s : shapes) {
    const int64_t n = s.n, k = s.k;
    const int64_t c32 = copies_for(n * k * 4), c8 = copies_for(n * k);
    // Weights: small deterministic values / codes (no NaN codes).
    std::vector<float> w32(static_cast<size_t>(c32 * n * k));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < c32 * n * k; ++i) w32[i] = static_cast<float>((i * 37) % 17 - 8) * 0.01f;
    std::vector<uint8_t> w8(static_cast<size_t>(c8 * n * k));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < c8 * n * k; ++i) w8[i] = static_cast<uint8_t>((i * 37) % 0x7E);
    std::vector<float> sw(static_cast<size_t>(n), 0.01f);
    std::vector<float> x(static_cast<size_t>(m_max * k));
    for (int64_t i = 0; i < m_max * k; ++i) x[i] = static_cast<float>((i * 13) % 11 - 5) * 0.1f;
    std::vector<uint8_t> qa(x.size());
    std::vector<float> sa(static_cast<size_t>(m_max));
    std::vector<float> y(static_cast<size_t>(m_max * n));
    for (int64_t m : {int64_t{1}, m_max}) {
      // m == 1 rotates through the copies (DRAM-bound); m > 1 reuses copy 0 (compute-bound).
      const double t32 = best_seconds_per_call([&](int64_t i) {
        const int64_t c = m == 1 ? i % c32 : 0;
        cpu::linear(x.data(), w32.data() + c * n * k, nullptr, y.data(), m, n, k);
      });
      const double t8 = best_seconds_per_call([&](int64_t i) {
        const int64_t c = m == 1 ? i % c8 : 0;
        quantize_per_token_e4m3(x.data(), m, k, qa.data(), sa.data());
        const Fp8WeightView w{w8.data() + c * n * k, sw.data(), ScaleGranularity::PerRow, n, k};
        linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, w, nullptr, y.data(), m);
      });
      char head[64];
      std::snprintf(head, sizeof(head), "%-20s %4lld", s.name, static_cast<long long>(m));
      std::string line = head + fmt("  %9.1f %8.1f  %6.2fx ", t32 * 1e6, t8 * 1e6, t32 / t8);
      if (m == 1) {
        const double g32 = static_cast<double>(n * k * 4) / t32 / 1e9;
        const double g8 = static_cast<double>(n * k) / t8 / 1e9;
        line += fmt("%6.1f GB/s %6.1f GB/s  %5.0f%%\n", g32, g8, 100.0 * g8 / bw);
        const double times = s.per_layer ? s.per_layer * kLayers : 1;
        token_f32 += times * t32;
        token_fp8 += times * t8;
      } else {
        const double flops = 2.0 * static_cast<double>(m * n * k);
        line += fmt("%6.1f GF/s %6.1f GF/s\n", flops / t32 / 1e9, flops / t8 / 1e9);
      }
      out += line;
    }
  }
  out += fmt("\nall SmolLM2-135M linears for one decode token (30 layers + lm_head, m = 1): FP32 "
             "%.2f ms, FP8 %.2f ms (%.2fx)\n",
             token_f32 * 1e3, token_fp8 * 1e3, token_f32 / token_fp8);
  out += "FP8 time includes the per-token activation quantization; GB/s counts weight bytes "
         "only (FP32: 4 B, FP8: 1 B per weight).\n";
  return out;
}

}  // namespace octet
