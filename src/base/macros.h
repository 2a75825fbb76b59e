// Compiler attributes and build switches used across the layers.
#pragma once

#define XALLOC_INLINE inline __attribute__((always_inline))
#define XALLOC_NOINLINE __attribute__((noinline))
#define XALLOC_LIKELY(x) __builtin_expect(!!(x), 1)
#define XALLOC_UNLIKELY(x) __builtin_expect(!!(x), 0)

// Misuse checks on the fast path (double and invalid frees) can be compiled
// out to measure what they cost: cmake -DXALLOC_MISUSE_CHECKS=OFF.
#if !defined(XALLOC_MISUSE_CHECKS)
#define XALLOC_MISUSE_CHECKS 1
#endif
