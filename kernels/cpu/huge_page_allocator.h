#pragma once
// std::allocator replacement for large, long-lived buffers (weights, the KV cache, activations):
// 2 MiB-aligned allocations marked MADV_HUGEPAGE, so that streaming 100+ MB of weights per
// decode step does not miss the TLB every 4 KiB (Linux transparent huge pages in "madvise"
// mode). On Linux a large allocation is its own anonymous mapping: it comes back zero-filled
// and its pages are faulted in when first touched, so a 1 GiB KV cache that serves a short
// prompt costs the pages it uses, not a 1 GiB memset at start (a VM backs a page at its first
// touch: ~9 s for 1 GiB measured on the CI machine). Small buffers (< 2 MiB), other systems
// and AddressSanitizer builds (which track heap blocks, not mappings) take the heap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define OCTET_HUGE_PAGE_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OCTET_HUGE_PAGE_HEAP 1
#endif
#endif
#if !defined(OCTET_HUGE_PAGE_HEAP) && !defined(__linux__)
#define OCTET_HUGE_PAGE_HEAP 1
#endif

namespace octet {

/// Bytes at or above which huge_page_alloc maps its own 2 MiB-aligned pages.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

/// Allocates `bytes` bytes, zero-filled; at least 2 MiB-aligned when bytes >= kHugePageBytes.
/// Throws std::bad_alloc. Free with huge_page_free(p, bytes).
inline void* huge_page_alloc(size_t bytes) {
  if (bytes < kHugePageBytes) {
    void* p = ::operator new(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) throw std::bad_alloc();
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
#if defined(OCTET_HUGE_PAGE_HEAP)
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
#else
  // Over-map by one huge page, then unmap the unaligned head and the tail.
  void* raw = mmap(nullptr, rounded + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  const size_t head = aligned - start;
  if (head > 0) munmap(raw, head);
  if (kHugePageBytes - head > 0)
    munmap(reinterpret_cast<void*>(aligned + rounded), kHugePageBytes - head);
#if defined(MADV_HUGEPAGE)
  madvise(reinterpret_cast<void*>(aligned), rounded, MADV_HUGEPAGE);  // advisory
#endif
  return reinterpret_cast<void*>(aligned);
#endif
}

/// Frees what huge_page_alloc(bytes) returned.
inline void huge_page_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
    return;
  }
#if defined(OCTET_HUGE_PAGE_HEAP)
  std::free(p);
#else
  munmap(p, (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
#endif
}

template <class T>
struct HugePageAllocator {
  using value_type = T;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(huge_page_alloc(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { huge_page_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

/// A vector whose storage uses huge pages when large (weights).
template <class T>
using WeightVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace octet
