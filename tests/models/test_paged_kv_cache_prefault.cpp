// PagedKVCache (models/paged_kv_cache.h): a new cache reads zero, and prefault() writes zeros
// over every block of every layer (K and V checked here), however much of it was used.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "models/paged_kv_cache.h"

using namespace octet;

namespace {

std::vector<uint8_t> contents(Backend& be, const Buffer& b) {
  std::vector<uint8_t> out(static_cast<size_t>(b.bytes()));
  be.download(b, 0, out.data(), b.bytes());
  return out;
}

bool all_zero(const std::vector<uint8_t>& v) {
  for (uint8_t x : v)
    if (x != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("paged KV cache: zero when new, and prefault zeroes what was written",
          "[paged_kv_cache]") {
  std::unique_ptr<Backend> be = make_cpu_backend();
  KVLayerSpec bf16;
  KVLayerSpec fp8;
  fp8.dtype = DType::FP8_E4M3;
  fp8.per_token_head = true;
  fp8.k_scale = fp8.v_scale = {1.0f, 1.0f};
  // 300 blocks x 16 tokens x 2 heads x 64 x 2 bytes = 1.2 MB per buffer (the heap path) and a
  // 3000-block layer of 12 MB (a mapping of its own).
  for (int64_t blocks : {int64_t{300}, int64_t{3000}}) {
    INFO("blocks " << blocks);
    PagedKVCache cache(*be, blocks, 16, 2, 64, {bf16, fp8});
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      CHECK(all_zero(contents(*be, cache.k_buffer(l))));
      CHECK(all_zero(contents(*be, cache.v_buffer(l))));
      // Dirty the first, a middle and the last byte of each buffer.
      for (const Buffer* b : {&cache.k_buffer(l), &cache.v_buffer(l)}) {
        const uint8_t ff = 0xFF;
        for (int64_t at : {int64_t{0}, b->bytes() / 2, b->bytes() - 1}) be->upload(*b, at, &ff, 1);
        CHECK_FALSE(all_zero(contents(*be, *b)));
      }
    }
    cache.prefault();
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      CHECK(all_zero(contents(*be, cache.k_buffer(l))));
      CHECK(all_zero(contents(*be, cache.v_buffer(l))));
    }
  }
}
