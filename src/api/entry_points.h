// The standard entry points' argument rules (overflow, alignment errors,
// errno), shared by the prefixed API and the malloc shim so both behave the
// same. Each is a thin inline wrapper around the core in alloc.h.
#pragma once

#include <cerrno>
#include <cstddef>

#include "frontend/alloc.h"
#include "xalloc/xalloc.h"

namespace xalloc::entry {

inline bool is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

XALLOC_INLINE void* calloc(size_t count, size_t size) {
  size_t bytes;
  if (XALLOC_UNLIKELY(__builtin_mul_overflow(count, size, &bytes))) {
    errno = ENOMEM;
    return nullptr;
  }
  return alloc_zeroed(bytes);
}

XALLOC_INLINE void* reallocarray(void* ptr, size_t count, size_t size) {
  size_t bytes;
  if (XALLOC_UNLIKELY(__builtin_mul_overflow(count, size, &bytes))) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(ptr, bytes, Caller::kRealloc);
}

// posix_memalign: EINVAL unless alignment is a power-of-two multiple of
// sizeof(void*); ENOMEM when memory runs out. *out is untouched on error.
XALLOC_INLINE int posix_memalign(void** out, size_t alignment, size_t size) {
  if (!is_power_of_two(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  int saved = errno;
  void* block = alloc_aligned(size, alignment);
  if (block == nullptr) {
    errno = saved;
    return ENOMEM;
  }
  *out = block;
  return 0;
}

// aligned_alloc and memalign: any power of two (also below sizeof(void*)),
// and since C17 any size. glibc returns NULL with EINVAL for a bad
// alignment; so does xalloc.
XALLOC_INLINE void* aligned_alloc(size_t alignment, size_t size) {
  if (XALLOC_UNLIKELY(!is_power_of_two(alignment))) {
    errno = EINVAL;
    return nullptr;
  }
  return alloc_aligned(size, alignment);
}

XALLOC_INLINE void* memalign(size_t alignment, size_t size) {
  // glibc's memalign rounds a non-power-of-two alignment up instead of failing.
  if (!is_power_of_two(alignment)) {
    if (alignment > (size_t{1} << 63)) {
      errno = EINVAL;
      return nullptr;
    }
    alignment = alignment == 0 ? 1 : size_t{1} << (64 - __builtin_clzll(alignment));
  }
  return alloc_aligned(size, alignment);
}

XALLOC_INLINE void* valloc(size_t size) { return alloc_aligned(size, kOsPageSize); }

XALLOC_INLINE void* pvalloc(size_t size) {
  size_t rounded = round_up(size, kOsPageSize);
  if (rounded < size) {
    errno = ENOMEM;
    return nullptr;
  }
  return alloc_aligned(rounded == 0 ? kOsPageSize : rounded, kOsPageSize);
}

// xalloc_get_stats without the huge-page coverage, whose read of
// /proc/self/smaps takes milliseconds in a big process (stats.cpp).
void get_counters(xalloc_stats_t* out);

}  // namespace xalloc::entry
