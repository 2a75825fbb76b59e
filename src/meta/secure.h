// Secure mode: the hardening built into libxalloc-secure.so.
//
// The same sources are compiled with XALLOC_SECURE=1: free-list pointers
// are encoded with a secret key that differs per slab, block markers are
// secret too, slab blocks are handed out in random order, every slab block
// ends in a canary checked when it is freed, freed blocks wait in a
// per-thread quarantine before they can be reused, and guard pages surround
// segment headers and follow large and huge blocks. In the default build every hook here is a
// constant that the compiler folds away, but for the free-marker secret,
// which every build uses (slab.h). docs/security.md has the details.
#pragma once

#include <cstddef>
#include <cstdint>

#if !defined(XALLOC_SECURE)
#define XALLOC_SECURE 0
#endif

namespace xalloc::secure {

inline constexpr bool kEnabled = XALLOC_SECURE != 0;

// Random, set once at start-up. Separate keys, so that a value a program
// may read in freed memory (an encoded link, a free marker) reveals nothing
// about the canaries, whose key is `canary`.
// Every free reads them: they fill a cache line of their own, so that no
// lock or counter that other threads write shares it (beside the span
// allocator's lock, 48-byte malloc/free pairs take 3.5x the time while
// another thread allocates 256 KiB blocks).
// (Hidden: read in one instruction, not through the address of the symbol.)
struct alignas(64) Secrets {
  uintptr_t canary;  // canaries, thread random seeds
  uintptr_t link;    // free-list and remote-list links
  uintptr_t marker;  // free markers (every build)
};
extern Secrets g_secrets __attribute__((visibility("hidden")));
void init_secret();

// Bytes at the end of every slab block that hold its canary.
inline constexpr size_t kCanaryBytes = kEnabled ? sizeof(uint64_t) : 0;
// The most later frees a freed slab block waits for before it can be
// reused (XALLOC_QUARANTINE; heap.h).
inline constexpr size_t kQuarantineDepthMax = 256;
// Guard pages: segment headers sit between two, large and huge blocks are
// followed by one.
inline constexpr size_t kGuardBytes = kEnabled ? 4096 : 0;

inline uintptr_t mix(uintptr_t value) {
  value ^= value >> 31;
  value *= 0x9E3779B97F4A7C15ull;
  return value ^ (value >> 29);
}

// A block's canary. Mixing the address through a public hash first would
// hide nothing more: one canary and its address give the secret either way.
inline uint64_t canary_of(const void* block) {
  return static_cast<uint64_t>(g_secrets.canary ^ reinterpret_cast<uintptr_t>(block));
}

// A per-thread xorshift generator for the allocation order of slabs.
uint64_t next_random();

}  // namespace xalloc::secure
