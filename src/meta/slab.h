// Slab free lists: the block-level operations shared by the fast paths
// (alloc.h), the heap's slow paths and the remote-free drain.
//
// A free block's first word links it to the next free block, its second
// holds a marker that says it is free (alloc.h explains the double-free
// check). In secure mode the link is encoded with a secret of its slab, the
// marker is secret, and every decoded link is checked to stay in its slab.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/macros.h"
#include "meta/page.h"
#include "meta/secure.h"
#include "meta/size_classes.h"


namespace xalloc {

[[noreturn]] void report_corrupt_free_list(const Page* page, const void* block);
[[noreturn]] void report_overwritten_canary(const Page* page, const void* block);
[[noreturn]] void report_written_after_free(const Page* page, const void* block);

// The marker of `block` while it is free: its address combined with a
// random secret of the process. Programs copy stale bytes into their blocks
// (an uninitialised field copied from the stack, a union's unused bytes);
// a marker anything in the process might hold already - an address the
// allocator itself leaves on the stack, a block's pointer to itself, the
// marker of some other free block - would make such a copy read as "free"
// and a correct program abort with a false double free.
// (`secret` is a parameter so that a loop marking many blocks can load it
// once: the compiler must assume the marker stores may change it.)
XALLOC_INLINE uintptr_t free_marker(const FreeBlock* block, uintptr_t secret = secure::g_secrets.marker) {
  return secret ^ reinterpret_cast<uintptr_t>(block);
}

// The key of `page`'s free-list links: a secret, different in every slab.
// A plain XOR is enough: a forged link must still decode to a block of the
// same slab (next_free checks it), and mixing the slab address first would
// not hide the key from a program that knows one link's decoded value.
// (`secret` is a parameter for loops, as in free_marker.)
XALLOC_INLINE uintptr_t link_key(const Page* page, uintptr_t secret = secure::g_secrets.link) {
  return secure::kEnabled ? secret ^ reinterpret_cast<uintptr_t>(page) : 0;
}

// True when `address` is the start of a block of `page` (a slab):
// divisibility by the class size without a division (div_magic_of).
XALLOC_INLINE bool is_block_start(const Page* page, uintptr_t address) {
  return (address - page->start) * page->div_magic < page->div_magic;
}

// True when `address`, which lies in `page`'s span (the slice map says so,
// so it is not below `start`), is the start of a block of `page` that has
// been carved; `limit` is page->carved_limit, which the slab's owner reads
// plainly (it is the only writer) and other threads atomically: one
// multiplication and one comparison (div_magic_of). A block past the
// carved part was never handed out by this slab: freeing it is misuse
// (typically a double free of a block of an earlier slab in the same
// memory), and it has no free marker to tell, as its memory may have been
// purged since.
XALLOC_INLINE bool is_carved_block_start(const Page* page, uintptr_t address, uint64_t limit) {
  return (address - page->start) * page->div_magic < limit;
}

XALLOC_INLINE FreeBlock* encode_link(const Page* page, FreeBlock* next, uintptr_t secret = secure::g_secrets.link) {
  return reinterpret_cast<FreeBlock*>(reinterpret_cast<uintptr_t>(next) ^ link_key(page, secret));
}

// The block after `block` on `page`'s free list.
XALLOC_INLINE FreeBlock* next_free(const Page* page, const FreeBlock* block) {
  FreeBlock* next = encode_link(page, block->next);
  if (secure::kEnabled && next != nullptr) {
    if (XALLOC_UNLIKELY(!is_carved_block_start(page, reinterpret_cast<uintptr_t>(next), page->carved_limit_now())))
      report_corrupt_free_list(page, block);
  }
  return next;
}

XALLOC_INLINE void set_next_free(const Page* page, FreeBlock* block, FreeBlock* next) {
  block->next = encode_link(page, next);
}

// Secure mode: the last bytes of each slab block hold a canary. It depends
// only on the block's address and nothing writes the tail of a free block,
// so the carve writes it once for the slab's life; except in the 16-byte
// class, where the canary is the free marker's word and is written again
// whenever a block is handed out.
//
// The canary is checked when the block is freed by its owner, and when a
// block freed by another thread reaches its owner (frontend/inbox.cpp). The
// load of the tail overlaps with the load of the block's marker, which
// misses too if the block is cold; in the freeing thread it would also
// take the tail's line from the threads that write the neighbouring
// blocks (the free hotspot, where neighbours are freed by different
// threads, takes 1.15x the time); a check when the block leaves the
// quarantine costs a second miss on the tail. In the 16-byte class
// the freeing thread checks: the marker is about to overwrite the canary.
XALLOC_INLINE bool canary_is_marker_word(const Page* page) { return secure::kEnabled && page->size_class == 0; }
static_assert(class_size_of(0) == sizeof(FreeBlock) && class_size_of(1) >= sizeof(FreeBlock) + sizeof(uint64_t));

XALLOC_INLINE void write_canary(const Page* page, void* block) {
  if (secure::kEnabled) {
    auto* canary = reinterpret_cast<uint64_t*>(static_cast<char*>(block) + page->block_size() - secure::kCanaryBytes);
    *canary = secure::canary_of(block);
  }
}

XALLOC_INLINE bool canary_intact(const Page* page, const void* block) {
  if (!secure::kEnabled) return true;
  auto* canary =
      reinterpret_cast<const uint64_t*>(static_cast<const char*>(block) + page->block_size() - secure::kCanaryBytes);
  return *canary == secure::canary_of(block);
}

// The check of a block freed by another thread, when it reaches its owner:
// true in the 16-byte class, whose canary (checked in free) the marker
// has replaced.
XALLOC_INLINE bool freed_block_canary_intact(const Page* page, const void* block) {
  return canary_is_marker_word(page) || canary_intact(page, block);
}

// Takes `block`, the head of the current slab's free list. The next
// block's link is what the next malloc of the class loads first, and a
// block freed long ago is no longer in the cache: its fetch starts now,
// overlapping with whatever the program does with this block. (A
// prefetch of null does nothing.)
XALLOC_INLINE void* slab_pop(Page* page, FreeBlock* block) {
  FreeBlock* next = next_free(page, block);
  __builtin_prefetch(next);
  page->free = next;
  page->needed++;
  if (XALLOC_MISUSE_CHECKS) block->marker = 0;
  if (canary_is_marker_word(page)) write_canary(page, block);
  return block;
}

// Pushes a block that is known to be a valid, marked block of `page`.
XALLOC_INLINE void slab_push(Page* page, FreeBlock* block, uintptr_t link_secret = secure::g_secrets.link) {
  block->next = encode_link(page, page->free, link_secret);
  page->free = block;
}

// Marks a carved block of `page` free; false if it is already free or
// (secure mode) its canary was overwritten - the caller reports it. Not
// `by_owner`: the owner checks the canary when the block reaches it.
XALLOC_INLINE bool slab_mark_free(const Page* page, FreeBlock* block, bool by_owner = true) {
  if (XALLOC_MISUSE_CHECKS) {
    uintptr_t marker = free_marker(block);
    bool check_canary = by_owner || canary_is_marker_word(page);
    if (XALLOC_UNLIKELY(block->marker == marker || (check_canary && !canary_intact(page, block)))) return false;
    block->marker = marker;
  }
  return true;
}

// Validates a block being freed and marks it free; false if it is not a
// carved block of `page` (`limit` as for is_carved_block_start) or
// slab_mark_free refuses it.
XALLOC_INLINE bool slab_check_and_mark(const Page* page, FreeBlock* block, uint64_t limit) {
  if (!XALLOC_MISUSE_CHECKS) return true;
  return XALLOC_LIKELY(is_carved_block_start(page, reinterpret_cast<uintptr_t>(block), limit)) &&
         slab_mark_free(page, block);
}

// A full slab wakes (rejoins its class's partial list) once this many of
// its blocks are free: fewer would move slabs in and out of the list for
// one block at a time.
inline uint32_t wake_threshold(uint32_t capacity) { return capacity >= 4 ? capacity / 4 : 1; }

// Blocks in use in `page`, a slab (whatever its state). From another
// thread than the owner it is an estimate: it reads the slab's counter and
// state, which the owner writes plainly on its fast paths, and may see them
// a moment old. Such a walk (statistics, the span allocator's allowance)
// holds an OwnerFieldReads for its duration.
uint64_t slab_blocks_in_use(const Page* page);

// Tells ThreadSanitizer to look away from the reads of a walk over other
// threads' slabs: each is one aligned word or byte written by its owner,
// and a stale value only skews an estimate. (Atomic writes on the owner's
// side would cost the fast paths instructions.) Does nothing otherwise.
#if defined(__SANITIZE_THREAD__)
#define XALLOC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XALLOC_TSAN 1
#endif
#endif
#if defined(XALLOC_TSAN)
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
#endif
struct OwnerFieldReads {
#if defined(XALLOC_TSAN)
  OwnerFieldReads() { __tsan_ignore_thread_begin(); }
  ~OwnerFieldReads() { __tsan_ignore_thread_end(); }
#endif
};

}  // namespace xalloc
