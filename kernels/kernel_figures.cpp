// `octet bench kernels --device D` (kernel_bench.h): GEMM TFLOP/s against a measured peak (on
// CUDA through cuBLASLt, kernels/cuda/kernel_figures.h; on the CPU through its backend) and
// paged decode attention bandwidth through the Backend interface against a measured copy.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/half.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/kernel_bench.h"
#if defined(OCTET_HAVE_CUDA)
#include "kernels/cuda/kernel_figures.h"
#endif

namespace octet {

namespace {

using Clock = std::chrono::steady_clock;

// Sizes of one run: Llama-3.1-8B's on CUDA, the CPU rehearsal's (shapes / 8) on the CPU.
struct Sizes {
  int64_t shape_div = 1;
  std::vector<int64_t> ms;
  int64_t peak = 8192;
  std::vector<int64_t> contexts, batches;
  int64_t copy_bytes = int64_t{2} << 30;
  int gemm_repeats = 20;
  int attention_series = 5, attention_calls = 10;  // median over series of back-to-back calls
};

Sizes cuda_sizes() {
  Sizes s;
  s.ms = {1, 16, 64, 256, 2048};
  s.contexts = {4096, 8192, 16384, 32768};
  s.batches = {1, 64};
  return s;
}

Sizes cpu_sizes() {
  Sizes s;
  s.shape_div = 8;
  s.ms = {1, 16, 64};
  s.peak = 512;
  s.contexts = {256, 512, 1024, 2048};
  s.batches = {1, 4};
  s.copy_bytes = int64_t{64} << 20;
  s.gemm_repeats = 5;
  s.attention_series = 3;
  s.attention_calls = 3;
  return s;
}

// Llama-3.1-8B's linears (n = out, k = in): q, k, v fused; o; gate and up fused; down.
struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape kShapes[] = {
    {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};

// Llama-3.1-8B attention: 32 query heads, 8 KV heads, head_dim 128; 16-token blocks.
constexpr int64_t kHeads = 32, kKVHeads = 8, kHeadDim = 128, kBlockSize = 16;

// "cuda" -> 0, "cuda:N" -> N (make_backend has already accepted the name).
int cuda_index(const std::string& device) {
  return device.size() > 5 && device.rfind("cuda:", 0) == 0 ? std::stoi(device.substr(5)) : 0;
}

bool is_cuda(const std::string& device) { return device.rfind("cuda", 0) == 0; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Least-squares slope of y over x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i)
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double d = n * sxx - sx * sx;
  return d != 0 ? (n * sxy - sx * sy) / d : 0.0;
}

// Deterministic values in [-1, 1) (xorshift64).
std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = static_cast<float>(static_cast<double>(x >> 40) * 0x1.0p-23 - 1.0);
  }
  return v;
}

Buffer upload(Backend& be, const void* src, int64_t bytes) {
  Buffer b = be.allocate(bytes);
  be.upload(b, 0, src, bytes);
  return b;
}

// Median ms of one call of `fn` on `be`: `series` series of `calls` back-to-back calls, each
// series between two synchronize()s, after one untimed call.
template <class Fn>
double time_calls(Backend& be, int series, int calls, Fn&& fn) {
  fn();
  be.synchronize();
  std::vector<double> per_call;
  for (int s = 0; s < series; ++s) {
    const auto t0 = Clock::now();
    for (int c = 0; c < calls; ++c) fn();
    be.synchronize();
    per_call.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() /
                       calls);
  }
  return median(per_call);
}

GemmFigure gemm_row(const std::string& shape, bool fp8, int64_t m, int64_t n, int64_t k) {
  GemmFigure g;
  g.shape = shape;
  g.dtype = fp8 ? "fp8_e4m3" : "bf16";
  g.m = m, g.n = n, g.k = k;
  return g;
}

void set_time(GemmFigure& g, double ms) {
  if (!(ms > 0)) {
    g.ms = g.tflops = g.weight_gbs = Figure::none("n/a (the timer read 0)");
    return;
  }
  const double flops = 2.0 * static_cast<double>(g.m) * g.n * g.k;
  const double w_bytes = static_cast<double>(g.n) * g.k * (g.dtype == "bf16" ? 2 : 1);
  g.ms = Figure::of(ms);
  g.tflops = Figure::of(flops / (ms * 1e-3) / 1e12);
  g.weight_gbs = Figure::of(w_bytes / (ms * 1e-3) / 1e9);
}

// The GEMM cases of `sizes`: shapes x m x dtype, then the peak square per dtype.
std::vector<GemmFigure> gemm_cases(const Sizes& sizes) {
  std::vector<GemmFigure> rows;
  for (bool fp8 : {true, false}) {
    for (const Shape& s : kShapes)
      for (int64_t m : sizes.ms)
        rows.push_back(gemm_row(s.name, fp8, m, s.n / sizes.shape_div, s.k / sizes.shape_div));
    rows.push_back(gemm_row("peak", fp8, sizes.peak, sizes.peak, sizes.peak));
  }
  return rows;
}

#if defined(OCTET_HAVE_CUDA)
void time_gemms_cuda(const std::string& device, const Sizes& sizes, std::vector<GemmFigure>& rows) {
  std::vector<cuda_kernels::GemmTimingCase> cases;
  for (const GemmFigure& g : rows) cases.push_back({g.dtype == "fp8_e4m3", g.m, g.n, g.k});
  const auto t = cuda_kernels::time_lt_gemms(cuda_index(device), cases, sizes.gemm_repeats);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (t[i].on_cublaslt) {
      rows[i].path = "cublaslt";
      set_time(rows[i], t[i].median_ms);
    } else {
      rows[i].path = "simt_fallback";
      rows[i].ms = rows[i].tflops = rows[i].weight_gbs =
          Figure::none("n/a (LtGemm::matmul refused the shape: the SIMT fallback would run)");
    }
  }
}

// cuBLASLt's outer-vector FP8 scales at f's shape; a CUDA error becomes the status, so the
// other figures still print.
void outer_vec_cuda(const std::string& device, const Sizes& sizes, OuterVecFigure& f) {
  const Figure none = Figure::none("n/a (not accepted)");
  f.ms = f.plain_ms = f.equal_fraction = f.max_rel_diff = none;
  try {
    const auto t =
        cuda_kernels::time_outer_vec_fp8(cuda_index(device), f.m, f.n, f.k, sizes.gemm_repeats);
    if (t.plain_ms > 0) f.plain_ms = Figure::of(t.plain_ms);
    if (!t.accepted) {
      f.status = "refused: " + t.why;
      return;
    }
    f.status = "accepted";
    f.ms = t.ms > 0 ? Figure::of(t.ms) : Figure::none("n/a (the timer read 0)");
    f.equal_fraction = Figure::of(t.equal_fraction);
    f.max_rel_diff = Figure::of(t.max_rel_diff);
  } catch (const std::exception& e) {
    f.status = std::string("n/a (") + e.what() + ")";
  }
}
#endif

// The CPU backend's linears: BF16 weights with FP32 activations (Backend::linear), FP8 W8A8
// with pre-quantized E4M3 activations (Backend::linear_w8a8, per-token and per-channel scales).
void time_gemms_cpu(Backend& be, const Sizes& sizes, std::vector<GemmFigure>& rows) {
  for (GemmFigure& g : rows) {
    const std::vector<float> xf = random_floats(static_cast<size_t>(g.m * g.k), 1);
    const std::vector<float> wf = random_floats(static_cast<size_t>(g.n * g.k), 2);
    Buffer y = be.allocate(g.m * g.n * 4);
    WeightRef w;
    w.n = g.n, w.k = g.k;
    Buffer w_buf, scale_buf, x_buf, a_scale_buf;
    if (g.dtype == "bf16") {
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = float_to_bf16(wf[i]);
      w_buf = upload(be, wb.data(), static_cast<int64_t>(wb.size() * 2));
      x_buf = upload(be, xf.data(), static_cast<int64_t>(xf.size() * 4));
      w.data = w_buf.data(), w.dtype = DType::BF16;
      const double ms = time_calls(be, sizes.gemm_repeats, 1, [&] {
        be.linear(x_buf.as<float>(), g.m, w, y.as<float>());
      });
      set_time(g, ms);
    } else {
      // Codes 0x30..0x37 with random signs: E4M3 magnitudes [0.5, 1).
      std::vector<uint8_t> wq(wf.size()), xq(xf.size());
      for (size_t i = 0; i < wf.size(); ++i) wq[i] = (wf[i] < 0 ? 0xB0 : 0x30) | (i & 7);
      for (size_t i = 0; i < xf.size(); ++i) xq[i] = (xf[i] < 0 ? 0xB0 : 0x30) | (i & 7);
      const std::vector<float> w_scale(static_cast<size_t>(g.n), 0.01f);
      const std::vector<float> a_scale(static_cast<size_t>(g.m), 0.01f);
      w_buf = be.upload_fp8_weight(wq.data(), g.n, g.k, 1, &w.layout);  // the engine's layout
      scale_buf = upload(be, w_scale.data(), g.n * 4);
      x_buf = upload(be, xq.data(), static_cast<int64_t>(xq.size()));
      a_scale_buf = upload(be, a_scale.data(), g.m * 4);
      w.data = w_buf.data(), w.dtype = DType::FP8_E4M3, w.scale = scale_buf.as<float>();
      const double ms = time_calls(be, sizes.gemm_repeats, 1, [&] {
        be.linear_w8a8(x_buf.as<uint8_t>(), a_scale_buf.as<float>(), ScaleGranularity::PerRow,
                       g.m, w, y.as<float>());
      });
      set_time(g, ms);
    }
    g.path = "cpu";
  }
}

// Host memcpy bandwidth, GB/s counting read and write: the CPU's stand-in for the D2D copy.
double host_copy_gbs(int64_t bytes, int repeats) {
  std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes), 0);
  std::memcpy(dst.data(), src.data(), src.size());
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  volatile char sink = dst[dst.size() / 2];
  (void)sink;
  const double t = median(s);
  return t > 0 ? 2.0 * static_cast<double>(bytes) / t / 1e9 : 0.0;
}

// Paged decode attention over a cache of max(batches) x max(contexts) tokens per KV dtype,
// sequences in disjoint blocks, filled through write_kv_cache.
void time_attention(Backend& be, const Sizes& sizes, KernelFigures& f) {
  const int64_t max_batch = *std::max_element(sizes.batches.begin(), sizes.batches.end());
  const int64_t max_ctx = *std::max_element(sizes.contexts.begin(), sizes.contexts.end());
  const int64_t tokens = max_batch * max_ctx, row = kKVHeads * kHeadDim;
  const int64_t chunk = std::min<int64_t>(tokens, 16384);
  const std::vector<float> kv_host = random_floats(static_cast<size_t>(chunk * row), 3);
  Buffer k_src = upload(be, kv_host.data(), chunk * row * 4);
  Buffer v_src = upload(be, kv_host.data(), chunk * row * 4);
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) slots[static_cast<size_t>(i)] = i;
  Buffer slot_buf = upload(be, slots.data(), tokens * 8);
  const std::vector<float> unit(kKVHeads, 1.0f);
  Buffer scale_buf = upload(be, unit.data(), kKVHeads * 4);
  const int64_t q_elems = max_batch * kHeads * kHeadDim;  // q, out: [batch, 32, 128] FP32
  const std::vector<float> q_host = random_floats(static_cast<size_t>(q_elems), 4);
  Buffer q = upload(be, q_host.data(), q_elems * 4);
  Buffer out = be.allocate(q_elems * 4);
  for (DType dtype : {DType::BF16, DType::FP8_E4M3}) {
    const std::string name = kv_cache_dtype_name(dtype);
    const int64_t elem = dtype_bytes(dtype);
    KVCacheView cache;
    cache.dtype = dtype;
    cache.num_blocks = tokens / kBlockSize;
    cache.block_size = kBlockSize;
    cache.num_kv_heads = kKVHeads;
    cache.head_dim = kHeadDim;
    cache.k_scale = cache.v_scale = scale_buf.as<float>();
    Buffer k = be.allocate(tokens * row * elem), v = be.allocate(tokens * row * elem);
    cache.k = k.data(), cache.v = v.data();
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk)
      be.write_kv_cache(cache, k_src.as<float>(), v_src.as<float>(),
                        slot_buf.as<int64_t>() + t0, std::min(chunk, tokens - t0));
    std::vector<double> ctx_k, ms_b1;
    for (int64_t batch : sizes.batches) {
      for (int64_t ctx : sizes.contexts) {
        const int64_t blocks = ctx / kBlockSize;
        // One query per sequence; sequence s owns blocks [s * blocks, (s + 1) * blocks).
        std::vector<int64_t> qsl(static_cast<size_t>(batch + 1));
        std::vector<int64_t> lens(static_cast<size_t>(batch), ctx);
        std::vector<int32_t> table(static_cast<size_t>(batch * blocks));
        for (int64_t s = 0; s <= batch; ++s) qsl[static_cast<size_t>(s)] = s;
        for (int64_t i = 0; i < batch * blocks; ++i)
          table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
        Buffer qsl_buf = upload(be, qsl.data(), (batch + 1) * 8);
        Buffer lens_buf = upload(be, lens.data(), batch * 8);
        Buffer table_buf = upload(be, table.data(), batch * blocks * 4);
        PagedAttentionBatch b;
        b.num_seqs = batch;
        b.query_start_loc = qsl_buf.as<int64_t>();
        b.seq_lens = lens_buf.as<int64_t>();
        b.block_tables = table_buf.as<int32_t>();
        b.max_blocks_per_seq = blocks;
        b.host_query_start_loc = qsl.data();
        b.host_seq_lens = lens.data();
        b.host_block_tables = table.data();  // FlashInfer's decode where the device runs it
        const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
        const double ms = time_calls(be, sizes.attention_series, sizes.attention_calls, [&] {
          be.paged_attention(cache, q.as<float>(), b, kHeads, 0, softmax_scale, out.as<float>());
        });
        AttentionFigure a;
        a.kv_dtype = name;
        a.batch = batch, a.context = ctx;
        a.kv_bytes = batch * ctx * row * 2 * elem;
        if (ms > 0) {
          a.ms = Figure::of(ms);
          a.gbs = Figure::of(static_cast<double>(a.kv_bytes) / (ms * 1e-3) / 1e9);
          a.fraction_of_copy = f.d2d_copy_gbs.ok() ? Figure::of(a.gbs.value / f.d2d_copy_gbs.value)
                                                   : Figure::none("n/a (no copy bandwidth)");
        } else {
          a.ms = a.gbs = a.fraction_of_copy = Figure::none("n/a (the timer read 0)");
        }
        if (batch == 1 && a.ms.ok()) {
          ctx_k.push_back(static_cast<double>(ctx) / 1024.0);
          ms_b1.push_back(ms);
        }
        f.attention.push_back(a);
      }
    }
    // At the largest batch and context: the last row of this dtype.
    f.attention_bandwidth_fraction[name] = f.attention.back().fraction_of_copy;
    if (ctx_k.size() >= 2) {
      const double s = slope(ctx_k, ms_b1);
      f.attention_slope_ms_per_1k[name] = Figure::of(s);
      f.attention_slope_ms_per_1k_32_layers[name] = Figure::of(32.0 * s);
    } else {
      f.attention_slope_ms_per_1k[name] = f.attention_slope_ms_per_1k_32_layers[name] =
          Figure::none("n/a (fewer than 2 batch-1 contexts timed)");
    }
  }
  const Figure& fp8 = f.attention_slope_ms_per_1k["fp8_e4m3"];
  const Figure& bf16 = f.attention_slope_ms_per_1k["bf16"];
  f.fp8_over_bf16_attention_slope =
      fp8.ok() && bf16.ok() && bf16.value > 0
          ? Figure::of(fp8.value / bf16.value)
          : Figure::none("n/a (the bf16 slope is not positive or a slope is missing)");
}

// Peak and aggregate figures from the GEMM rows.
void summarize_gemms(const Sizes& sizes, KernelFigures& f) {
  const int64_t m_max = sizes.ms.back();
  for (bool fp8 : {true, false}) {
    const std::string dtype = fp8 ? "fp8_e4m3" : "bf16";
    Figure peak = Figure::none("n/a (the peak GEMM did not run)");
    double flops = 0, ms = 0;
    std::string missing;
    for (const GemmFigure& g : f.gemm) {
      if (g.dtype != dtype) continue;
      if (g.shape == "peak") {
        peak = g.tflops;
      } else if (g.m == m_max) {
        if (!g.ms.ok()) missing = g.shape;
        flops += 2.0 * static_cast<double>(g.m) * g.n * g.k;
        ms += g.ms.value;
      }
    }
    const Figure agg =
        missing.empty() && ms > 0
            ? Figure::of(flops / (ms * 1e-3) / 1e12)
            : Figure::none("n/a (" + missing + " at m = " + std::to_string(m_max) +
                           " was not timed)");
    const Figure frac = agg.ok() && peak.ok() && peak.value > 0
                            ? Figure::of(agg.value / peak.value)
                            : Figure::none("n/a (no aggregate or no peak)");
    (fp8 ? f.fp8_peak_tflops : f.bf16_peak_tflops) = peak;
    (fp8 ? f.fp8_gemm_tflops : f.bf16_gemm_tflops) = agg;
    (fp8 ? f.fp8_gemm_fraction_of_peak : f.bf16_gemm_fraction_of_peak) = frac;
  }
}

}  // namespace

KernelFigures measure_kernel_figures(const std::string& device) {
  std::unique_ptr<Backend> be = make_backend(device);  // throws for unknown / unavailable
  const bool cuda = is_cuda(resolve_device(device));
  const Sizes sizes = cuda ? cuda_sizes() : cpu_sizes();
  KernelFigures f;
  f.device = be->name();
  f.sizes = cuda ? "llama-3.1-8b" : "cpu rehearsal (shapes / 8, m <= 64, peak 512^3, contexts "
                                    "256-2048, batch 1 and 4)";
  f.gemm = gemm_cases(sizes);
  f.fp8_outer_vec.m = 2048, f.fp8_outer_vec.n = 4096, f.fp8_outer_vec.k = 4096;  // 8B's o_proj
  if (cuda) {
#if defined(OCTET_HAVE_CUDA)
    time_gemms_cuda(resolve_device(device), sizes, f.gemm);
    f.d2d_copy_gbs = Figure::of(cuda_kernels::d2d_copy_gbs(cuda_index(resolve_device(device)),
                                                           sizes.copy_bytes, 20));
#endif
  } else {
    time_gemms_cpu(*be, sizes, f.gemm);
    f.d2d_copy_gbs = Figure::of(host_copy_gbs(sizes.copy_bytes, 5));
    const Figure none = Figure::none("n/a (CUDA only: cuBLASLt's scale modes)");
    f.fp8_outer_vec.status = none.na;
    f.fp8_outer_vec.ms = f.fp8_outer_vec.plain_ms = none;
    f.fp8_outer_vec.equal_fraction = f.fp8_outer_vec.max_rel_diff = none;
  }
  summarize_gemms(sizes, f);
  time_attention(*be, sizes, f);
#if defined(OCTET_HAVE_CUDA)
  // Last: a fault in an untried cuBLASLt mode would poison the context for any figure after it.
  if (cuda) outer_vec_cuda(resolve_device(device), sizes, f.fp8_outer_vec);
#endif
  return f;
}

std::string cpu_w8a8_kernel_name() { return w8a8_kernel_name(); }

double measure_device_bandwidth_gbs(const std::string& device) {
  const std::string resolved = resolve_device(device);
  if (!is_cuda(resolved)) return measure_read_bandwidth_gbs();
  make_backend(resolved);  // throws std::invalid_argument when the GPU is missing
#if defined(OCTET_HAVE_CUDA)
  return cuda_kernels::d2d_copy_gbs(cuda_index(resolved), int64_t{1} << 30, 10);
#else
  return 0.0;  // not reached: make_backend throws without CUDA
#endif
}

}  // namespace octet
