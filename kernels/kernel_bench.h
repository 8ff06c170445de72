#pragma once
// The CPU kernel benchmark behind `octet bench kernels` (defined in kernels/cpu/w8a8_bench.cpp):
// FP32 linear, BF16 and W8A8 on the linear shapes of SmolLM2-135M at decode (m = 1),
// batched-decode (m = 4, 16, 64) and prefill batch sizes, with a measured memory read
// bandwidth as the floor a memory-bound GEMV can reach. Declared here so that engine/ reaches
// it without including kernels/cpu.
// Also the device figures of `octet bench kernels --device D` (kernels/kernel_figures.cpp):
// GEMM TFLOP/s against a measured peak, paged decode attention bandwidth against a measured copy.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace octet {

/// Runs the benchmark and returns a printable table (takes ~20 seconds). Per shape and batch size
/// m in {1, 4, 16, 64, m_max} (m_max >= 2; sizes >= m_max left out): FP32 (cpu::linear), BF16
/// (linear_bf16) and FP8 W8A8 (quantize_per_token_e4m3 + linear_w8a8; on AVX-512 CPUs also the
/// AVX2 path) times, FP8 tokens/s and time relative to m = 1. Batches below m_max cycle their
/// weights through copies totalling >= 256 MiB, so they come from DRAM as in a decode step
/// (GB/s of FP8 weight bytes), m_max reuses one copy (GFLOP/s, 2 m n k per call). Then the
/// time of all SmolLM2 linears for one step of m tokens, and the read bandwidth of a 256 MiB
/// buffer streamed by 2 threads.
std::string run_kernel_benchmark(int64_t m_max);

/// Memory read bandwidth, GB/s: a 256 MiB buffer read by the kernels' threads (32-byte loads
/// with AVX2), best of 10 (the floor a memory-bound decode step is measured against).
double measure_read_bandwidth_gbs();

/// The W8A8 kernel the CPU backend runs on this CPU (kernels/cpu/w8a8.h w8a8_kernel_name).
std::string cpu_w8a8_kernel_name();

/// A measured figure, or the reason there is none (printed "n/a (reason)"; never an estimate).
struct Figure {
  double value = 0.0;
  std::string na;  // empty: `value` holds the figure
  bool ok() const { return na.empty(); }
  static Figure of(double v) { return Figure{v, ""}; }
  static Figure none(std::string why) { return Figure{0.0, std::move(why)}; }
};

/// One GEMM y[m, n] = act[m, k] . W[n, k]^T with FP32 output.
struct GemmFigure {
  std::string shape;  // "qkv", "o", "gate_up", "down" (Llama-3.1-8B's linears) or "peak"
  std::string dtype;  // "fp8_e4m3" (E4M3 x E4M3) or "bf16" (BF16 x BF16; FP32 x BF16 on the CPU)
  int64_t m = 0, n = 0, k = 0;
  std::string path;   // "cublaslt", "simt_fallback" (cuBLASLt refused it: not timed), "cpu"
  Figure ms;          // median time of one call
  Figure tflops;      // 2 m n k / ms
  Figure weight_gbs;  // weight bytes (n k x 1 or 2) / ms
};

/// One paged decode attention call: `batch` sequences of `context` tokens, one query each,
/// Llama-3.1-8B's head layout (32 query heads, 8 KV heads, head_dim 128), one layer.
struct AttentionFigure {
  std::string kv_dtype;  // "bf16" or "fp8_e4m3"
  int64_t batch = 0, context = 0;
  int64_t kv_bytes = 0;     // K and V bytes the call reads: batch x context x 8 x 128 x 2 x size
  Figure ms;                // time of one call
  Figure gbs;               // kv_bytes / ms
  Figure fraction_of_copy;  // gbs / d2d_copy_gbs
};

/// cuBLASLt's outer-vector FP8 scales against octet's GEMM and epilogue kernel, one shape
/// (kernels/cuda/kernel_figures.h time_outer_vec_fp8). CUDA only.
struct OuterVecFigure {
  std::string status;  // "accepted", "refused: <cuBLASLt's answer>" or "n/a (reason)"
  int64_t m = 0, n = 0, k = 0;
  Figure ms, plain_ms;                  // the outer-vector GEMM; octet's GEMM + epilogue
  Figure equal_fraction, max_rel_diff;  // outputs with octet's bits; largest relative difference
};

/// What `octet bench kernels --device D --json` prints (docs/benchmarks.md, "Device figures").
struct KernelFigures {
  std::string device;  // the backend's name
  std::string sizes;   // which sizes ran: real Llama-3.1-8B sizes (CUDA) or the CPU rehearsal's
  std::vector<GemmFigure> gemm;  // per shape, m and dtype, then the two peak rows
  Figure fp8_peak_tflops, bf16_peak_tflops;  // the square peak GEMM
  /// The four shapes at the largest m (one layer's linears for a prefill chunk): total FLOPs /
  /// total time, and that over the peak.
  Figure fp8_gemm_tflops, bf16_gemm_tflops;
  Figure fp8_gemm_fraction_of_peak, bf16_gemm_fraction_of_peak;
  Figure d2d_copy_gbs;  // device-to-device copy, read + write bytes / time
  std::vector<AttentionFigure> attention;
  /// Per KV dtype: fraction_of_copy at the largest batch and context.
  std::map<std::string, Figure> attention_bandwidth_fraction;
  /// Per KV dtype: least-squares slope of a batch-1 call's time against context, ms per 1024
  /// tokens, one layer; and the same times 32 (the 32 layers of Llama-3.1-8B: the ITL slope).
  std::map<std::string, Figure> attention_slope_ms_per_1k;
  std::map<std::string, Figure> attention_slope_ms_per_1k_32_layers;
  Figure fp8_over_bf16_attention_slope;  // fp8_e4m3 slope / bf16 slope (the seed's: 0.54)
  OuterVecFigure fp8_outer_vec;          // Llama-3.1-8B's o_proj at m = 2048 (CUDA)
};

/// Measures the figures on `device` ("cpu", "cuda", "cuda:N"): on CUDA at Llama-3.1-8B sizes
/// (GEMMs through cuBLASLt's LtGemm, m = 1, 16, 64, 256, 2048, peak 8192^3; attention through
/// the backend at 4K-32K context, batch 1 and 64; a 2 GiB copy), well under a minute on an H200;
/// on the CPU the same figures at tiny sizes (shapes / 8, m <= 64, peak 512^3, contexts
/// 256-2048, batch 1 and 4, a 64 MiB memcpy), seconds. Throws std::invalid_argument for an
/// unknown or unavailable device, std::runtime_error on a device error.
KernelFigures measure_kernel_figures(const std::string& device);

/// The bandwidth a decode step's floor is taken against: on CUDA the device-to-device copy
/// (1 GiB, read + write GB/s), on the CPU measure_read_bandwidth_gbs(). Throws as
/// measure_kernel_figures.
double measure_device_bandwidth_gbs(const std::string& device);

}  // namespace octet
