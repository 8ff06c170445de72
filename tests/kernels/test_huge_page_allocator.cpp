// huge_page_alloc (kernels/cpu/huge_page_allocator.h): zero-filled, 2 MiB-aligned when large,
// usable to its last byte, and reusable after a free (the backend's Buffer contract).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/huge_page_allocator.h"

using octet::huge_page_alloc;
using octet::huge_page_free;
using octet::kHugePageBytes;

namespace {

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("huge_page_alloc: every size comes back zero-filled and writable to its end",
          "[huge_page]") {
  for (size_t bytes : {size_t{1}, size_t{4096}, kHugePageBytes - 1, kHugePageBytes,
                       kHugePageBytes + 1, 3 * kHugePageBytes + 12345}) {
    INFO("bytes " << bytes);
    for (int round = 0; round < 2; ++round) {  // the second round may reuse the first's memory
      auto* p = static_cast<uint8_t*>(huge_page_alloc(bytes));
      REQUIRE(p != nullptr);
      CHECK(all_zero(p, bytes));
      if (bytes >= kHugePageBytes) CHECK(reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0);
      std::memset(p, 0xA5, bytes);  // dirty it: a reuse that is not re-zeroed fails round 2
      CHECK(p[bytes - 1] == 0xA5);
      huge_page_free(p, bytes);
    }
  }
}

TEST_CASE("WeightVector holds large and small arrays", "[huge_page]") {
  octet::WeightVector<float> big(kHugePageBytes / sizeof(float) + 7, 1.5f);
  CHECK(reinterpret_cast<uintptr_t>(big.data()) % kHugePageBytes == 0);
  CHECK(big.back() == 1.5f);
  octet::WeightVector<int> small{1, 2, 3};
  small.push_back(4);
  CHECK(small[3] == 4);
  big.resize(10);
  big.shrink_to_fit();
  CHECK(big[9] == 1.5f);
}
