// `octet bench kernels --device cuda`: cuBLASLt GEMM times through LtGemm and the
// device-to-device copy bandwidth (kernel_figures.h).
#include "kernels/cuda/kernel_figures.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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
      for (int i = 0; i < repeats; ++i) {
        timer.record(i);
        lt.matmul(type, act.p, w_at(kWarmup + i), c.m, c.n, c.k, c.k, static_cast<float*>(d.p));
      }
      timer.record(repeats);
      t.median_ms = timer.median_ms();
    }
    check(cudaGetLastError(), "LtGemm::matmul");
    check(cudaStreamSynchronize(timer.stream), "cudaStreamSynchronize");
    out.push_back(t);
  }
  return out;
}

double d2d_copy_gbs(int device, int64_t bytes, int repeats) {
  check(cudaSetDevice(device), "cudaSetDevice");
  const size_t n = static_cast<size_t>(bytes);
  DeviceMemory src(n), dst(n);
  Timer timer(repeats);
  check(cudaMemsetAsync(src.p, 1, n, timer.stream), "cudaMemsetAsync");
  check(cudaMemcpyAsync(dst.p, src.p, n, cudaMemcpyDeviceToDevice, timer.stream),
        "cudaMemcpyAsync");
  for (int i = 0; i < repeats; ++i) {
    timer.record(i);
    check(cudaMemcpyAsync(dst.p, src.p, n, cudaMemcpyDeviceToDevice, timer.stream),
          "cudaMemcpyAsync");
  }
  timer.record(repeats);
  const double ms = timer.median_ms();
  return ms > 0 ? 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace octet::cuda_kernels
