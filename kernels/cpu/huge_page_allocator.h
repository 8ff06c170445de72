#pragma once
// std::allocator replacement for large, long-lived weight buffers: 2 MiB-aligned allocations
// marked MADV_HUGEPAGE, so that streaming 100+ MB of weights per decode step does not miss the
// TLB every 4 KiB (Linux transparent huge pages in "madvise" mode; elsewhere a plain aligned
// allocation). Small buffers (< 2 MiB) take the ordinary path.
#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace octet {

template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {
      void* p = ::operator new(bytes);
      return static_cast<T*>(p);
    }
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure only costs speed
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugePage) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

/// A vector whose storage uses huge pages when large (weights).
template <class T>
using WeightVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace octet
