// NcclCommunicator (kernels/cuda/nccl_communicator.h) on the GPUs of this machine, against
// sums, maxima and layouts worked out on the host. Compiled with tests only when CUDA and NCCL
// were found (OCTET_HAVE_NCCL); otherwise its one case reports skipped (77), never passed, and
// scripts/gpu_check counts that as a failure on a GPU machine. Without a GPU each test
// exits with 77 (skipped). With one GPU the world-1 cases run (NCCL runs one rank per GPU);
// with two or more, every collective runs over all GPUs, one thread per rank. The BF16 sum
// (all_reduce_sum_bf16) is checked on integers exact in any order, and at world 2 on sums that
// round (one addition: the CPU communicators' bits).
#if OCTET_HAVE_NCCL

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cuda/nccl_communicator.h"

using octet::cuda::make_nccl_communicators;
using octet::cuda::NcclCommunicator;

namespace {

int gpu_count_or_skip() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count > 0) return count;
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

// One rank's device buffer and stream on its GPU.
struct RankMemory {
  int device = 0;
  cudaStream_t stream = nullptr;
  float* buf = nullptr;    // [n_buf]
  float* recv = nullptr;   // [n_recv]
};

// Per-rank inputs: value(rank, i) = (rank + 1) * 0.5 + (i % 97) - 40; small halves, so the sum
// over up to 8 ranks is exact in float whatever the order and the host reference is exact.
float value(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * 0.5 + static_cast<double>(i % 97) - 40.0);
}

// CUDA errors on rank threads (Catch2's assertions are for the main thread only).
struct ThreadErrors {
  std::mutex mu;
  std::string first;
  void check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    std::lock_guard lock(mu);
    if (first.empty()) first = std::string(what) + ": " + cudaGetErrorString(e);
  }
};

// Runs fn(rank) on one thread per rank (rank r's device current on its thread) and joins.
template <class F>
void on_ranks(int world, const std::vector<RankMemory>& mem, F fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(mem[r].device);
      fn(r);
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace

TEST_CASE("nccl: a unique id is 128 bytes and fresh each time", "[nccl][cuda]") {
  gpu_count_or_skip();
  const auto a = octet::cuda::nccl_unique_id();
  const auto b = octet::cuda::nccl_unique_id();
  CHECK(a != b);
  CHECK(octet::cuda::nccl_version() >= 21300);  // NCCL >= 2.13: ncclGetLastError
}

TEST_CASE("nccl: collectives over every GPU match the host reference", "[nccl][cuda]") {
  const int gpus = gpu_count_or_skip();
  const int world = std::min(gpus, 8);
  const int64_t n = 100003;  // not a multiple of anything NCCL chunks by
  std::vector<RankMemory> mem(world);
  std::vector<int> devices;
  std::vector<void*> streams;
  for (int r = 0; r < world; ++r) {
    mem[r].device = r;
    CUDA_REQUIRE(cudaSetDevice(r));
    CUDA_REQUIRE(cudaStreamCreateWithFlags(&mem[r].stream, cudaStreamNonBlocking));
    CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&mem[r].buf), n * sizeof(float)));
    CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&mem[r].recv), world * n * sizeof(float)));
    devices.push_back(r);
    streams.push_back(mem[r].stream);
  }
  auto comms = make_nccl_communicators(devices, streams);
  REQUIRE(static_cast<int>(comms.size()) == world);
  for (int r = 0; r < world; ++r) {
    CHECK(comms[r]->rank() == r);
    CHECK(comms[r]->world_size() == world);
    CHECK(comms[r]->device() == r);
    CHECK(comms[r]->stream() == mem[r].stream);
  }

  ThreadErrors errors;
  auto upload = [&](int r, const std::vector<float>& h) {
    errors.check(cudaMemcpyAsync(mem[r].buf, h.data(), n * sizeof(float),
                                 cudaMemcpyHostToDevice, mem[r].stream),
                 "upload");
  };
  auto download = [&](int r, float* src, int64_t count) {
    std::vector<float> h(count);
    errors.check(cudaMemcpyAsync(h.data(), src, count * sizeof(float), cudaMemcpyDeviceToHost,
                                 mem[r].stream),
                 "download");
    errors.check(cudaStreamSynchronize(mem[r].stream), "cudaStreamSynchronize");
    return h;
  };

  // all_reduce_sum: exact sums, bit-identical on every rank.
  std::vector<std::vector<float>> got(world);
  on_ranks(world, mem, [&](int r) {
    std::vector<float> h(n);
    for (int64_t i = 0; i < n; ++i) h[i] = value(r, i);
    upload(r, h);
    comms[r]->all_reduce_sum(mem[r].buf, n);
    got[r] = download(r, mem[r].buf, n);
  });
  REQUIRE(errors.first == "");
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int q = 0; q < world; ++q) want += value(q, i);
      if (got[r][i] != static_cast<float>(want)) ++bad;
    }
    CHECK(bad == 0);
    CHECK(std::memcmp(got[r].data(), got[0].data(), n * sizeof(float)) == 0);
  }

  // all_reduce_sum_bf16 over the first n BF16s of each buf. Integers of at most 8 significant
  // bits in every partial sum (|sum| <= 8 x 21): exact in BF16 whatever NCCL's order. At world
  // 2 also values whose sum rounds: one addition, so NCCL's result is the CPU communicators'
  // (the FP32 sum rounded once, to nearest even) bit for bit.
  auto bf16_of = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint16_t>(u >> 16);  // exact for the values below
  };
  auto widen = [](uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  };
  auto round_bf16 = [](float v) {  // RNE, finite v (the reference of kernels/common/half.h's rule)
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  };
  auto bvalue = [](int rank, int64_t i) { return static_cast<float>(i % 29 - 14 + rank); };
  // Rank r's rounding input: 1 + (i % 128) 2^-7 on rank 0 (a BF16), 2^-8 x odd on rank 1.
  auto rvalue = [&](int rank, int64_t i) {
    return rank == 0 ? widen(static_cast<uint16_t>(0x3F80 + i % 128))
                     : widen(bf16_of(static_cast<float>(2 * (i % 5) + 1) * 0.00390625f));
  };
  for (const bool rounding : {false, true}) {
    if (rounding && world != 2) continue;
    INFO("bf16, rounding inputs " << rounding);
    std::vector<std::vector<uint16_t>> got16(world);
    on_ranks(world, mem, [&](int r) {
      std::vector<uint16_t> h(n);
      for (int64_t i = 0; i < n; ++i) h[i] = bf16_of(rounding ? rvalue(r, i) : bvalue(r, i));
      auto* buf16 = reinterpret_cast<uint16_t*>(mem[r].buf);
      errors.check(cudaMemcpyAsync(buf16, h.data(), n * 2, cudaMemcpyHostToDevice,
                                   mem[r].stream),
                   "upload bf16");
      comms[r]->all_reduce_sum_bf16(buf16, n);
      got16[r].resize(n);
      errors.check(cudaMemcpyAsync(got16[r].data(), buf16, n * 2, cudaMemcpyDeviceToHost,
                                   mem[r].stream),
                   "download bf16");
      errors.check(cudaStreamSynchronize(mem[r].stream), "cudaStreamSynchronize");
    });
    REQUIRE(errors.first == "");
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r);
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        float sum = 0.0f;
        for (int q = 0; q < world; ++q) sum += rounding ? rvalue(q, i) : bvalue(q, i);
        if (got16[r][i] != (rounding ? round_bf16(sum) : bf16_of(sum))) ++bad;
      }
      CHECK(bad == 0);
      CHECK(got16[r] == got16[0]);
    }
  }

  // all_reduce_max: rank r holds -value except at i % world == r, where it holds +1000 + i.
  on_ranks(world, mem, [&](int r) {
    std::vector<float> h(n);
    for (int64_t i = 0; i < n; ++i)
      h[i] = (i % world == r) ? 1000.0f + static_cast<float>(i) : -1000.0f - value(r, i);
    upload(r, h);
    comms[r]->all_reduce_max(mem[r].buf, n);
    got[r] = download(r, mem[r].buf, n);
  });
  REQUIRE(errors.first == "");
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (got[r][i] != 1000.0f + static_cast<float>(i)) ++bad;
    }
    CHECK(bad == 0);
  }

  // all_gather, out of place and in place: recv = rank 0's, rank 1's, ... send.
  for (bool in_place : {false, true}) {
    INFO("in place " << in_place);
    on_ranks(world, mem, [&](int r) {
      std::vector<float> h(n);
      for (int64_t i = 0; i < n; ++i) h[i] = value(r, i);
      float* send = mem[r].buf;
      if (in_place) {
        send = mem[r].recv + r * n;
        errors.check(cudaMemcpyAsync(send, h.data(), n * sizeof(float),
                                     cudaMemcpyHostToDevice, mem[r].stream),
                     "upload in place");
      } else {
        upload(r, h);
      }
      comms[r]->all_gather(send, n, mem[r].recv);
      got[r] = download(r, mem[r].recv, world * n);
    });
    REQUIRE(errors.first == "");
    for (int r = 0; r < world; ++r) {
      int64_t bad = 0;
      for (int q = 0; q < world; ++q)
        for (int64_t i = 0; i < n; ++i)
          if (got[r][q * n + i] != value(q, i)) ++bad;
      CHECK(bad == 0);
    }
  }

  // broadcast of raw bytes from the last rank.
  const int root = world - 1;
  const int64_t bytes = 4099;
  std::vector<std::vector<uint8_t>> got_bytes(world);
  on_ranks(world, mem, [&](int r) {
    std::vector<uint8_t> h(bytes);
    for (int64_t i = 0; i < bytes; ++i) h[i] = static_cast<uint8_t>(r == root ? i * 13 + 1 : 0xEE);
    errors.check(cudaMemcpyAsync(mem[r].buf, h.data(), bytes, cudaMemcpyHostToDevice,
                                 mem[r].stream),
                 "upload bytes");
    comms[r]->broadcast(mem[r].buf, bytes, root);
    got_bytes[r].resize(bytes);
    errors.check(cudaMemcpyAsync(got_bytes[r].data(), mem[r].buf, bytes,
                                 cudaMemcpyDeviceToHost, mem[r].stream),
                 "download bytes");
    errors.check(cudaStreamSynchronize(mem[r].stream), "cudaStreamSynchronize");
  });
  REQUIRE(errors.first == "");
  for (int r = 0; r < world; ++r) {
    int64_t bad = 0;
    for (int64_t i = 0; i < bytes; ++i)
      if (got_bytes[r][i] != static_cast<uint8_t>(i * 13 + 1)) ++bad;
    CHECK(bad == 0);
  }

  comms.clear();
  for (RankMemory& m : mem) {
    cudaSetDevice(m.device);
    cudaFree(m.buf);
    cudaFree(m.recv);
    cudaStreamDestroy(m.stream);
  }
}

TEST_CASE("nccl: a communicator from an id joins as its rank, bad arguments are errors",
          "[nccl][cuda]") {
  gpu_count_or_skip();
  CUDA_REQUIRE(cudaSetDevice(0));
  const auto id = octet::cuda::nccl_unique_id();
  NcclCommunicator comm(id, 0, 1, 0, nullptr);  // world 1 on the legacy default stream
  CHECK(comm.rank() == 0);
  CHECK(comm.world_size() == 1);
  float* d = nullptr;
  CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 3 * sizeof(float)));
  const float in[3] = {1.5f, -2.0f, 3.25f};
  CUDA_REQUIRE(cudaMemcpy(d, in, sizeof in, cudaMemcpyHostToDevice));
  comm.all_reduce_sum(d, 3);  // one rank: the sum is the value
  comm.all_reduce_sum(d, 0);  // nothing queued
  float out[3] = {};
  CUDA_REQUIRE(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
  CHECK(out[0] == 1.5f);
  CHECK(out[1] == -2.0f);
  CHECK(out[2] == 3.25f);
  // BF16, one rank: unchanged (1.5, -2, 3.25; a NaN's payload too).
  const uint16_t in16[4] = {0x3FC0, 0xC000, 0x4050, 0x7FC1};
  CUDA_REQUIRE(cudaMemcpy(d, in16, sizeof in16, cudaMemcpyHostToDevice));
  comm.all_reduce_sum_bf16(reinterpret_cast<uint16_t*>(d), 4);
  comm.all_reduce_sum_bf16(reinterpret_cast<uint16_t*>(d), 0);
  uint16_t out16[4] = {};
  CUDA_REQUIRE(cudaMemcpy(out16, d, sizeof out16, cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(out16, in16, sizeof in16) == 0);
  cudaFree(d);

  CHECK_THROWS_AS(NcclCommunicator(id, 1, 1, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(make_nccl_communicators({0, 0}, {nullptr, nullptr}), std::invalid_argument);
  CHECK_THROWS_AS(make_nccl_communicators({0}, {}), std::invalid_argument);
}

#else  // !OCTET_HAVE_NCCL

#include <cstdio>
#include <cstdlib>

#include <catch2/catch.hpp>

TEST_CASE("nccl: built without NCCL", "[nccl][cuda]") {
  std::printf("SKIPPED: built without NCCL (CMake found no nccl.h / libnccl)\n");
  std::fflush(stdout);
  std::exit(77);
}

#endif  // OCTET_HAVE_NCCL
