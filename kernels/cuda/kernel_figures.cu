// `octet bench kernels --device cuda`: cuBLASLt GEMM times through LtGemm and the
// device-to-device copy bandwidth (kernel_figures.h).
#include "kernels/cuda/kernel_figures.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"

namespace octet::cuda_kernels {

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("bench kernels: ") + what + ": " +
                             cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

// Owns one device allocation.
struct DeviceMemory {
  void* p = nullptr;
  explicit DeviceMemory(size_t bytes) { check(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~DeviceMemory() { cudaFree(p); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

// Owns a stream and the events of one timed series.
struct Timer {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  explicit Timer(int n) : events(static_cast<size_t>(n) + 1) {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (auto& e : events) check(cudaEventCreate(&e), "cudaEventCreate");
  }
  ~Timer() {
    for (auto& e : events) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void record(int i) {
    check(cudaEventRecord(events[static_cast<size_t>(i)], stream), "cudaEventRecord");
  }
  // Median of the gaps between consecutive events 0..n, ms.
  double median_ms() {
    check(cudaEventSynchronize(events.back()), "cudaEventSynchronize");
    std::vector<double> gaps;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "cudaEventElapsedTime");
      gaps.push_back(ms);
    }
    std::sort(gaps.begin(), gaps.end());
    return gaps[gaps.size() / 2];
  }
  // Median ms of call(0) .. call(n - 1), each between two events (n: the events less one).
  template <class Call>
  double series(Call&& call) {
    const int n = static_cast<int>(events.size()) - 1;
    for (int i = 0; i < n; ++i) {
      record(i);
      call(i);
    }
    record(n);
    return median_ms();
  }
};

// p[i] = (hash(seed, i) & and_mask) | or_bits for i < n: BF16 or pairs of E4M3 codes of
// magnitude [0.5, 1) and random sign (the masks keep the exponent fixed: no Inf or NaN).
__global__ void fill_pattern(uint16_t* p, int64_t n, uint32_t seed, uint16_t and_mask,
                             uint16_t or_bits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed ^
                 static_cast<uint32_t>(i >> 32) * 0x85EBCA6Bu;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    p[i] = static_cast<uint16_t>((h & and_mask) | or_bits);
  }
}

void fill(void* p, size_t bytes, bool fp8, uint32_t seed, cudaStream_t stream) {
  // BF16 s.01111110.mmmmmmm: +-[0.5, 1); E4M3 pairs s.0110.mmm: +-[0.5, 1).
  const uint16_t and_mask = fp8 ? 0x8787 : 0x807F, or_bits = fp8 ? 0x3030 : 0x3F00;
  fill_pattern<<<1024, 256, 0, stream>>>(static_cast<uint16_t*>(p),
                                         static_cast<int64_t>(bytes / 2), seed, and_mask,
                                         or_bits);
  check(cudaGetLastError(), "fill_pattern launch");
}

constexpr size_t kWeightCycleBytes = size_t{512} << 20;
constexpr int kWarmup = 3;

// p[i] in [2^-8, 2^-7): a seeded mantissa under a fixed exponent.
__global__ void fill_scales(float* p, int64_t n, uint32_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    p[i] = __uint_as_float(0x3B800000u | (h & 0x7FFFFFu));
  }
}

// The cuBLASLt objects of one outer-vector GEMM, destroyed in reverse.
struct OuterVecLt {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  OuterVecLt() = default;
  OuterVecLt(const OuterVecLt&) = delete;
  OuterVecLt& operator=(const OuterVecLt&) = delete;
  ~OuterVecLt() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

// Sets up `lt` for D^T [n, m] = W [n, k] . act^T [k, m] as LtGemm does (gemm.cu), plus the
// outer-vector scale modes: A (W) scales its n rows by w_scale, B (act) its m columns by a_scale.
// Returns "" or the first call that failed, with its status.
std::string outer_vec_setup(OuterVecLt& lt, int64_t m, int64_t n, int64_t k,
                            const float* a_scale, const float* w_scale) {
  std::string why;
  auto ok = [&why](cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS && why.empty())
      why = std::string(what) + ": cublas status " + std::to_string(static_cast<int>(st));
    return why.empty();
  };
  if (!ok(cublasLtCreate(&lt.handle), "cublasLtCreate")) return why;
  if (!ok(cublasLtMatmulDescCreate(&lt.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc")) return why;
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value, const char* what) {
    ok(cublasLtMatmulDescSetAttribute(lt.desc, attr, &value, sizeof(value)), what);
  };
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "TRANSA");
  set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "TRANSB");
  set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{0}, "FAST_ACCUM");
  set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode, "A_SCALE_MODE OUTER_VEC_32F");
  set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode, "B_SCALE_MODE OUTER_VEC_32F");
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale, "A_SCALE_POINTER");
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale, "B_SCALE_POINTER");
  const auto uk = static_cast<uint64_t>(k), un = static_cast<uint64_t>(n),
             um = static_cast<uint64_t>(m);
  ok(cublasLtMatrixLayoutCreate(&lt.a, CUDA_R_8F_E4M3, uk, un, k), "layout A");
  ok(cublasLtMatrixLayoutCreate(&lt.b, CUDA_R_8F_E4M3, uk, um, k), "layout B");
  ok(cublasLtMatrixLayoutCreate(&lt.d, CUDA_R_32F, un, um, n), "layout D");
  ok(cublasLtMatmulPreferenceCreate(&lt.pref), "preference");
  if (!why.empty()) return why;
  const uint64_t ws = kLtWorkspaceBytes;
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE, align = 16;
  ok(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                          sizeof(ws)),
     "MAX_WORKSPACE_BYTES");
  ok(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                          &reduction, sizeof(reduction)),
     "REDUCTION_SCHEME_MASK");
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    ok(cublasLtMatmulPreferenceSetAttribute(lt.pref, attr, &align, sizeof(align)), "alignment");
  return why;
}

// Downloads n floats.
std::vector<float> download_floats(const void* p, int64_t n) {
  std::vector<float> h(static_cast<size_t>(n));
  check(cudaMemcpy(h.data(), p, h.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return h;
}

}  // namespace

std::vector<GemmTiming> time_lt_gemms(int device, const std::vector<GemmTimingCase>& cases,
                                      int repeats) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  size_t act_bytes = 16, w_bytes = 16, d_bytes = 16;
  for (const auto& c : cases) {
    const size_t elem = c.fp8 ? 1 : 2;
    act_bytes = std::max(act_bytes, static_cast<size_t>(c.m * c.k) * elem);
    w_bytes = std::max(w_bytes, static_cast<size_t>(c.n * c.k) * elem);
    d_bytes = std::max(d_bytes, static_cast<size_t>(c.m * c.n) * sizeof(float));
  }
  // Room for copies of the largest weight totalling >= kWeightCycleBytes (at least 2).
  const size_t w_pool = std::max(2 * w_bytes, kWeightCycleBytes + w_bytes);
  DeviceMemory act(act_bytes), w(w_pool), d(d_bytes);
  Timer timer(repeats);
  LtGemm lt(timer.stream, prop.major, prop.minor);
  std::vector<GemmTiming> out;
  uint32_t seed = 1;
  for (const auto& c : cases) {
    const GemmInput type = c.fp8 ? GemmInput::E4M3 : GemmInput::BF16;
    const size_t elem = c.fp8 ? 1 : 2;
    const size_t one_w = static_cast<size_t>(c.n * c.k) * elem;
    // Copies 256-byte aligned (cuBLASLt wants 16), as many as fit the pool, at least 2.
    const size_t stride = (one_w + 255) / 256 * 256;
    const int copies = static_cast<int>(std::max<size_t>(
        1, std::min(w_pool / stride, (kWeightCycleBytes + stride - 1) / stride)));
    fill(act.p, static_cast<size_t>(c.m * c.k) * elem, c.fp8, seed++, timer.stream);
    fill(w.p, stride * static_cast<size_t>(copies), c.fp8, seed++, timer.stream);
    const auto w_at = [&](int i) {
      return static_cast<const void*>(static_cast<const char*>(w.p) +
                                      stride * static_cast<size_t>(i % copies));
    };
    GemmTiming t;
    t.on_cublaslt = lt.matmul(type, act.p, w_at(0), c.m, c.n, c.k, c.k,
                              static_cast<float*>(d.p));
    if (t.on_cublaslt) {
      for (int i = 1; i < kWarmup; ++i)
        lt.matmul(type, act.p, w_at(i), c.m, c.n, c.k, c.k, static_cast<float*>(d.p));
      t.median_ms = timer.series([&](int i) {
        lt.matmul(type, act.p, w_at(kWarmup + i), c.m, c.n, c.k, c.k, static_cast<float*>(d.p));
      });
    }
    check(cudaGetLastError(), "LtGemm::matmul");
    check(cudaStreamSynchronize(timer.stream), "cudaStreamSynchronize");
    out.push_back(t);
  }
  return out;
}

OuterVecTiming time_outer_vec_fp8(int device, int64_t m, int64_t n, int64_t k, int repeats) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  OuterVecTiming t;
  if (prop.major * 10 + prop.minor < 89) {
    t.why = "no FP8 tensor cores (sm_89 and later)";
    return t;
  }
  const auto mk = static_cast<size_t>(m * k), nk = static_cast<size_t>(n * k),
             mn = static_cast<size_t>(m * n);
  DeviceMemory act(mk), w(nk), a_scale(static_cast<size_t>(m) * 4),
      w_scale(static_cast<size_t>(n) * 4), d_plain(mn * 4), d_outer(mn * 4);
  Timer timer(repeats);
  fill(act.p, mk, true, 11, timer.stream);
  fill(w.p, nk, true, 12, timer.stream);
  fill_scales<<<256, 256, 0, timer.stream>>>(static_cast<float*>(a_scale.p), m, 13);
  fill_scales<<<256, 256, 0, timer.stream>>>(static_cast<float*>(w_scale.p), n, 14);
  check(cudaGetLastError(), "fill_scales launch");

  // Octet's path: the production GEMM, then the epilogue kernel the backend runs after it.
  LtGemm plain(timer.stream, prop.major, prop.minor);
  auto* dp = static_cast<float*>(d_plain.p);
  const auto* as = static_cast<const float*>(a_scale.p);
  const auto* ws = static_cast<const float*>(w_scale.p);
  auto run_plain = [&] {
    if (!plain.matmul(GemmInput::E4M3, act.p, w.p, m, n, k, k, dp)) return false;
    w8a8_scale(dp, as, true, ws, true, nullptr, m, n, timer.stream);
    return true;
  };
  if (!run_plain()) {
    t.why = "LtGemm::matmul refused the shape (octet's path would run simt_gemm)";
    return t;
  }
  for (int i = 1; i < kWarmup; ++i) run_plain();
  t.plain_ms = timer.series([&](int) { run_plain(); });

  OuterVecLt lt;
  t.why = outer_vec_setup(lt, m, n, k, as, ws);
  if (!t.why.empty()) return t;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.handle, lt.desc, lt.a, lt.b, lt.d,
                                                           lt.d, lt.pref, 1, &result, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    t.why = "cublasLtMatmulAlgoGetHeuristic: status " + std::to_string(static_cast<int>(st)) +
            ", " + std::to_string(found) + " algorithms";
    return t;
  }
  auto* dq = static_cast<float*>(d_outer.p);
  const float alpha = 1.0f, beta = 0.0f;
  auto run_outer = [&] {
    return cublasLtMatmul(lt.handle, lt.desc, &alpha, w.p, lt.a, act.p, lt.b, &beta, dq, lt.d,
                          dq, lt.d, &result.algo, nullptr, 0, timer.stream);
  };
  const cublasStatus_t first = run_outer();
  if (first != CUBLAS_STATUS_SUCCESS) {
    t.why = "cublasLtMatmul: status " + std::to_string(static_cast<int>(first));
    return t;
  }
  for (int i = 1; i < kWarmup; ++i) run_outer();
  t.ms = timer.series([&](int) { run_outer(); });
  check(cudaStreamSynchronize(timer.stream), "cudaStreamSynchronize");
  t.accepted = true;

  const std::vector<float> a = download_floats(d_outer.p, m * n), b = download_floats(dp, m * n);
  size_t equal = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ab = 0, bb = 0;
    std::memcpy(&ab, &a[i], 4);
    std::memcpy(&bb, &b[i], 4);
    equal += ab == bb;
    const double den = std::max(std::fabs(static_cast<double>(b[i])), 1e-30);
    t.max_rel_diff = std::max(t.max_rel_diff, std::fabs(static_cast<double>(a[i]) - b[i]) / den);
  }
  t.equal_fraction = a.empty() ? 0.0 : static_cast<double>(equal) / static_cast<double>(a.size());
  return t;
}

double d2d_copy_gbs(int device, int64_t bytes, int repeats) {
  check(cudaSetDevice(device), "cudaSetDevice");
  const size_t n = static_cast<size_t>(bytes);
  DeviceMemory src(n), dst(n);
  Timer timer(repeats);
  check(cudaMemsetAsync(src.p, 1, n, timer.stream), "cudaMemsetAsync");
  check(cudaMemcpyAsync(dst.p, src.p, n, cudaMemcpyDeviceToDevice, timer.stream),
        "cudaMemcpyAsync");
  const double ms = timer.series([&](int) {
    check(cudaMemcpyAsync(dst.p, src.p, n, cudaMemcpyDeviceToDevice, timer.stream),
          "cudaMemcpyAsync");
  });
  return ms > 0 ? 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace octet::cuda_kernels
