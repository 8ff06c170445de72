// Decode benchmark of paged attention (see paged_attention_bench.h).
#include "kernels/cpu/paged_attention_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include <omp.h>

#include "kernels/cpu/half.h"
#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/w8a8_bench.h"

namespace octet {

namespace {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

PagedAttentionBenchResult bench_paged_attention_decode(DType dtype, int64_t context_len,
                                                       int64_t num_seqs, int64_t num_heads,
                                                       int64_t num_kv_heads, int64_t head_dim,
                                                       int64_t block_size, int iters) {
  if (context_len <= 0 || num_seqs <= 0 || num_heads <= 0 || num_kv_heads <= 0 ||
      head_dim <= 0 || block_size <= 0 || iters <= 0 || num_heads % num_kv_heads != 0)
    throw std::invalid_argument("bench_paged_attention_decode: bad sizes");
  const int64_t bytes = dtype_bytes(dtype);
  const int64_t row = num_kv_heads * head_dim;
  const int64_t blocks_per_seq = (context_len + block_size - 1) / block_size;
  const int64_t blocks_per_copy = blocks_per_seq * num_seqs;
  const int64_t copy_bytes = blocks_per_copy * block_size * row * bytes * 2;
  const int64_t copies = std::max<int64_t>(2, ((256ll << 20) + copy_bytes - 1) / copy_bytes);
  const int64_t num_blocks = copies * blocks_per_copy;

  // Cache contents: small finite values (FP8: codes without the NaN codes).
  WeightVector<uint8_t> k(static_cast<size_t>(num_blocks * block_size * row * bytes));
  WeightVector<uint8_t> v(k.size());
  const int64_t elems = num_blocks * block_size * row;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < elems; ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    if (bytes == 1) {
      k[i] = static_cast<uint8_t>((h >> 8) % 0x70 | ((h >> 4) & 0x80));
      v[i] = static_cast<uint8_t>((h >> 16) % 0x70 | ((h >> 12) & 0x80));
    } else {
      const float a = static_cast<float>(static_cast<int>(h >> 20) - 2048) / 1024.0f;
      const uint16_t b = dtype == DType::BF16 ? float_to_bf16(a) : float_to_fp16(a);
      std::memcpy(&k[2 * i], &b, 2);
      std::memcpy(&v[2 * i], &b, 2);
    }
  }
  std::vector<float> scales(static_cast<size_t>(num_kv_heads), 0.01f);
  const KVCacheView cache{k.data(),     v.data(),     dtype,         num_blocks, block_size,
                          num_kv_heads, head_dim,     scales.data(), scales.data()};

  // Per copy, the batch's block tables: a shuffled permutation of the copy's blocks.
  std::mt19937 rng(1);
  std::vector<int32_t> tables(static_cast<size_t>(copies * blocks_per_copy));
  for (int64_t c = 0; c < copies; ++c) {
    int32_t* t = tables.data() + c * blocks_per_copy;
    std::iota(t, t + blocks_per_copy, static_cast<int32_t>(c * blocks_per_copy));
    std::shuffle(t, t + blocks_per_copy, rng);
  }
  std::vector<int64_t> qsl(static_cast<size_t>(num_seqs + 1)), lens(num_seqs, context_len);
  std::iota(qsl.begin(), qsl.end(), 0);
  std::vector<float> q(static_cast<size_t>(num_seqs * num_heads * head_dim), 0.05f);
  std::vector<float> out(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) * 0.03f - 0.1f;

  int64_t call = 0;
  auto one = [&] {
    const int64_t c = call++ % copies;
    const PagedAttentionBatch b{num_seqs, qsl.data(), lens.data(),
                                tables.data() + c * blocks_per_copy, blocks_per_seq};
    paged_attention(cache, q.data(), b, num_heads, 0, 0.125f, out.data());
  };
  for (int64_t i = 0; i < std::min<int64_t>(copies, 4); ++i) one();  // warm-up
  double best = 1e30, best_cpu = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) one();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt / iters);
    best_cpu = std::min(best_cpu, (process_cpu_seconds() - c0) / iters);
  }
  PagedAttentionBenchResult r;
  r.seconds_per_call = best;
  r.cpu_seconds_per_call = best_cpu;
  r.kv_bytes_per_call = num_seqs * context_len * row * bytes * 2;
  r.kv_gb_per_s = static_cast<double>(r.kv_bytes_per_call) / best / 1e9;
  return r;
}

std::string run_paged_attention_benchmark() {
  std::string out;
  char line[256];
  const int saved = omp_get_max_threads();
  std::snprintf(line, sizeof(line),
                "paged attention decode, SmolLM2 shape (9 q heads, 3 KV heads, head_dim 64, "
                "block 16, one layer); memory read bandwidth %.1f GB/s (2 threads)\n",
                measure_read_bandwidth_gbs());
  out += line;
  out += "seqs  context  dtype      threads   us/call   ns/token   GB/s   cpu us/call\n";
  for (int64_t seqs : {1, 8})
    for (int64_t ctx : {512, 2048, 8192})
      for (DType dtype : {DType::BF16, DType::FP8_E4M3})
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          const int iters = static_cast<int>(std::max<int64_t>(8, (1 << 22) / (ctx * seqs)));
          const PagedAttentionBenchResult r =
              bench_paged_attention_decode(dtype, ctx, seqs, 9, 3, 64, 16, iters);
          std::snprintf(line, sizeof(line),
                        "%4lld  %7lld  %-9s  %7d  %8.1f  %9.2f  %5.1f  %8.1f\n",
                        static_cast<long long>(seqs), static_cast<long long>(ctx),
                        kv_cache_dtype_name(dtype), threads, r.seconds_per_call * 1e6,
                        r.seconds_per_call * 1e9 / static_cast<double>(ctx * seqs),
                        r.kv_gb_per_s, r.cpu_seconds_per_call * 1e6);
          out += line;
        }
  omp_set_num_threads(saved);
  return out;
}

}  // namespace octet
