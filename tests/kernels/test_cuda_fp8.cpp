// GPU FP8 conversion (kernels/cuda/fp8_convert.h) against the CPU code (kernels/cpu/fp8.h),
// bit for bit, on ~13M stress values and all 256 codes. Compiled only when nvcc built the CUDA
// kernels (OCTET_HAVE_CUDA); otherwise this binary holds no tests. Without a usable GPU each
// test exits with 77, which CTest reports as skipped, never as passed.
#if OCTET_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/fp8.h"
#include "kernels/cuda/fp8_convert.h"
#include "kernels/fp8_test_support.h"

using octet::DType;
using octet_test::MismatchLog;
using FormatCase = octet_test::Fp8FormatCase;

namespace {

constexpr auto& kFormats = octet_test::kFp8Formats;

void skip_without_gpu() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count > 0) return;
  std::printf("SKIPPED: no CUDA GPU (cudaGetDeviceCount: %s, %d devices)\n",
              cudaGetErrorString(err), count);
  std::fflush(stdout);
  std::exit(77);
}

#define CUDA_REQUIRE(expr)                                        \
  do {                                                            \
    const cudaError_t cuda_require_err_ = (expr);                 \
    INFO(#expr << ": " << cudaGetErrorString(cuda_require_err_)); \
    REQUIRE(cuda_require_err_ == cudaSuccess);                    \
  } while (0)

// A device buffer freed on scope exit.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) {
    CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr), (n ? n : 1) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Encodes src on the GPU (format) and returns the codes.
std::vector<uint8_t> gpu_encode(DType format, const float* src, size_t n) {
  DeviceBuffer<float> d_src(n);
  DeviceBuffer<uint8_t> d_dst(n);
  CUDA_REQUIRE(cudaMemcpy(d_src.ptr, src, n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_REQUIRE(
      static_cast<cudaError_t>(octet::fp8_encode_cuda(format, d_src.ptr, d_dst.ptr, n, nullptr)));
  std::vector<uint8_t> out(n);
  CUDA_REQUIRE(cudaMemcpy(out.data(), d_dst.ptr, n, cudaMemcpyDeviceToHost));
  return out;
}

// Decodes codes on the GPU and returns the floats.
std::vector<float> gpu_decode(DType format, const uint8_t* codes, size_t n) {
  DeviceBuffer<uint8_t> d_src(n);
  DeviceBuffer<float> d_dst(n);
  CUDA_REQUIRE(cudaMemcpy(d_src.ptr, codes, n, cudaMemcpyHostToDevice));
  CUDA_REQUIRE(
      static_cast<cudaError_t>(octet::fp8_decode_cuda(format, d_src.ptr, d_dst.ptr, n, nullptr)));
  std::vector<float> out(n);
  CUDA_REQUIRE(cudaMemcpy(out.data(), d_dst.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace

TEST_CASE("fp8 cuda: GPU encode equals the CPU encode on 13M stress values", "[fp8][cuda]") {
  skip_without_gpu();
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    const std::vector<uint8_t> gpu = gpu_encode(fc.format, floats.data(), floats.size());
    std::vector<uint8_t> cpu(floats.size());
    octet::fp8_encode(fc.format, floats.data(), cpu.data(), floats.size());
    MismatchLog log;
    octet_test::compare_fp8_codes(octet_test::fp8_stress_bits(), cpu, gpu, log);
    INFO("GPU vs CPU: " << log.summary());
    CHECK(log.count() == 0);
  }
}

TEST_CASE("fp8 cuda: GPU decode equals the CPU decode for all codes", "[fp8][cuda]") {
  skip_without_gpu();
  // All 256 codes, then 1001 more (odd length: the kernel's single-element tail runs too).
  std::vector<uint8_t> codes(256 + 1001);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i < 256 ? i : i * 37);
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    const std::vector<float> gpu = gpu_decode(fc.format, codes.data(), codes.size());
    MismatchLog log;
    for (size_t i = 0; i < codes.size(); ++i) {
      const uint32_t cpu = std::bit_cast<uint32_t>(octet::fp8_to_float(fc.format, codes[i]));
      if (std::bit_cast<uint32_t>(gpu[i]) != cpu) {
        log.add("code 0x%02X: CPU 0x%08X, GPU 0x%08X", codes[i], cpu,
                std::bit_cast<uint32_t>(gpu[i]));
      }
    }
    INFO("GPU vs CPU: " << log.summary());
    CHECK(log.count() == 0);
  }
}

TEST_CASE("fp8 cuda: odd lengths and unaligned device pointers", "[fp8][cuda]") {
  skip_without_gpu();
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{255}, size_t{4097}}) {
      for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
        INFO("n " << n << " offset " << offset);
        DeviceBuffer<float> d_src(n + offset);
        DeviceBuffer<uint8_t> d_codes(n + offset + 1);
        DeviceBuffer<float> d_back(n + offset);
        CUDA_REQUIRE(cudaMemset(d_codes.ptr, 0xAB, n + offset + 1));
        CUDA_REQUIRE(cudaMemcpy(d_src.ptr + offset, floats.data() + 1000 * n, n * sizeof(float),
                                cudaMemcpyHostToDevice));
        CUDA_REQUIRE(static_cast<cudaError_t>(octet::fp8_encode_cuda(
            fc.format, d_src.ptr + offset, d_codes.ptr + offset, n, nullptr)));
        CUDA_REQUIRE(static_cast<cudaError_t>(octet::fp8_decode_cuda(
            fc.format, d_codes.ptr + offset, d_back.ptr + offset, n, nullptr)));
        std::vector<uint8_t> codes(n + offset + 1);
        std::vector<float> back(n + offset);
        CUDA_REQUIRE(cudaMemcpy(codes.data(), d_codes.ptr, codes.size(), cudaMemcpyDeviceToHost));
        CUDA_REQUIRE(cudaMemcpy(back.data(), d_back.ptr, back.size() * sizeof(float),
                                cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < offset; ++i) CHECK(int{codes[i]} == 0xAB);
        CHECK(int{codes[offset + n]} == 0xAB);
        for (size_t i = 0; i < n; ++i) {
          const float x = floats[1000 * n + i];
          REQUIRE(int{codes[offset + i]} == int{octet::fp8_from_float(fc.format, x)});
          REQUIRE(std::bit_cast<uint32_t>(back[offset + i]) ==
                  std::bit_cast<uint32_t>(octet::fp8_to_float(fc.format, codes[offset + i])));
        }
      }
    }
  }
}

#endif  // OCTET_HAVE_CUDA
