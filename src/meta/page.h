// Page descriptors: the metadata of one span of slices.
//
// A span is either a slab (blocks of one size class, owned by one thread
// heap), a large block, a huge block (its own mapping) or free space. The
// descriptor of a span lives in its segment's header, at the index of the
// span's first slice; blocks themselves carry no header.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/config.h"
#include "meta/size_classes.h"

namespace xalloc {

struct Heap;

// What a free block holds: the next pointer of whatever list it is on, and
// a marker that says "this block is free": its address mixed with a secret
// of the process (free_marker in slab.h), which no program stores in its
// data by accident.
struct FreeBlock {
  FreeBlock* next;
  uintptr_t marker;
};

enum class PageKind : uint8_t {
  kFree = 0,   // unused slices (in the span allocator's bins)
  kSlab = 1,   // blocks of one class
  kLarge = 2,  // one block of more than kMaxSlabSize bytes
  kHuge = 3,   // one block with a mapping of its own
  kHeader = 4, // the segment header's slices
  // Free slices whose pages a thread is giving back to the OS outside the
  // span allocator's lock: out of the bins, neither taken nor merged with
  // a neighbour until they return to the bins (span_allocator.h).
  kPurging = 5,
};

// Memory no block lives in: what a lookup of a freed block's address finds.
inline bool is_free_kind(PageKind kind) { return kind == PageKind::kFree || kind == PageKind::kPurging; }

// Where a slab stands with its owning heap (frontend/heap_slabs.cpp).
enum class SlabState : uint8_t {
  kDetached = 0,  // not owned, or being set up
  kCurrent = 1,   // the slab its class allocates from
  kPartial = 2,   // has free blocks; on the heap's partial list of its class
  kFull = 3,      // no free blocks; on no list until enough are freed
};

// Two cache lines, split by who writes them, and two of padding. A thread
// that frees another thread's block reads only the first; the owner writes
// the second on every malloc and free of the slab. Sharing one line, each
// remote free would take the line back from the owner's core (and the
// owner's next free take it back again).
//
// The slabs of different threads sit in neighbouring slices, so their
// descriptors are neighbours, and the processors' prefetchers fetch the
// lines next to those a thread reads (the next line, the other line of an
// aligned 128-byte pair, a few lines further on a run). Whatever they bring
// in must not be a line another thread writes on its fast path, or that
// thread's next malloc or free waits to take it back. So the read line comes
// first, the owner's line after it, and 128 bytes of nothing before the next
// descriptor. (Without the padding a free pulls in the next descriptor's
// owner line: larson with 16 threads takes 1.8x the time on 16 cores.)
struct alignas(256) Page {
  // --- first line: read by any thread that frees into the span ---
  // Slab: the heap that owns it; otherwise null. Written only while the
  // slab has no live block, so a free of a live block never races with it.
  Heap* owner;
  uintptr_t start;           // first byte of the first block
  union {
    uint64_t div_magic;      // slab: its class's div_magic_of (size_classes.h)
    uint64_t large_usable;   // large: bytes the block can hold
    uint64_t freed_at;       // free span: when it became free (ms), for purge decay
  };
  // Slab: bytes from `start` carved into blocks so far (lazily, in
  // batches). No block past it has been handed out or listed since the slab
  // was made, so a pointer there is not a live block: the free path checks.
  // Written by the owning heap, read by any thread that frees into the slab
  // (relaxed atomics: it only grows while blocks of the slab are live, and a
  // block was carved before it was handed to the thread that frees it).
  // carved_limit is carved_end * div_magic (modulo 2^64), what the free
  // path compares with: is_carved_block_start (slab.h).
  uint64_t carved_limit;
  uint32_t carved_end;
  // Written under the span allocator's lock (or before the span is handed
  // out).
  uint16_t slice_count : 12; // span length in slices
  uint16_t kind_bits : 4;    // PageKind
  uint8_t size_class;        // slab
  // Slab: kClassInfo[size_class].size, set with size_class. Kept here, on
  // the line the free path reads, because secure mode's canary check needs
  // it on every free; through the class table it was one dependent load more.
  uint32_t block_bytes;

  // --- second line: written by the owning heap's fast paths ---
  alignas(64) FreeBlock* free;  // blocks ready to hand out (slab)
  // Frees that may happen before this slab needs its owner's slow path.
  // A partial slab counts its blocks in use (it is empty at zero); a full
  // slab counts down to the frees that wake it; the current slab of a class
  // counts its blocks in use plus kCurrentBias, so that it never reaches
  // zero while malloc takes from it.
  uint64_t needed;
  union {
    Page* next;              // slab: heap's partial list; free: span bin list
    uint64_t sample_bytes;   // large/huge block the profiler sampled: its requested size
  };
  union {
    Page* prev;
    uint64_t sample_stack;   // ...: its stack's index in the profiler's table
  };
  // Written by the owning heap only (or under the span allocator's lock
  // before the span is handed out).
  uint8_t state_bits : 2;    // SlabState
  uint8_t is_zero : 1;       // slab, large, huge: its memory was all zero when it was taken
  uint8_t sampled : 1;       // large/huge: a block the heap profiler sampled
  uint8_t guard_protected : 1; // large/huge, secure mode: its guard page is PROT_NONE, not a mark (os.h)
  uint8_t unused_bits : 3;
  // Large, secure mode: where the span's guard page is, in bytes from
  // `start` (the end of its last block's pages; a kept span keeps it).
  uint32_t guard_offset;
  // Large: the heap of the thread that allocated the block, which gets the
  // span back when another thread frees it (kept_spans.cpp).
  Heap* large_home;

  PageKind kind() const { return static_cast<PageKind>(kind_bits); }
  void set_kind(PageKind k) { kind_bits = static_cast<uint16_t>(k) & 15; }
  SlabState state() const { return static_cast<SlabState>(state_bits); }
  void set_state(SlabState s) { state_bits = static_cast<uint8_t>(s) & 3; }
  size_t span_bytes() const { return size_t{slice_count} << kSliceShift; }
  uint32_t block_size() const { return block_bytes; }
  // Slab: blocks that fit, and blocks carved so far.
  uint32_t capacity() const { return kClassInfo[size_class].capacity; }
  uint32_t carved_bytes() const { return __atomic_load_n(&carved_end, __ATOMIC_RELAXED); }
  uint64_t carved_limit_now() const { return __atomic_load_n(&carved_limit, __ATOMIC_RELAXED); }
  void set_carved_bytes(uint32_t bytes) {
    __atomic_store_n(&carved_end, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&carved_limit, bytes * div_magic, __ATOMIC_RELAXED);
  }
  uint32_t carved() const { return carved_bytes() / block_size(); }
  bool fully_carved() const { return carved_bytes() == capacity() * block_size(); }
};

static_assert(sizeof(Page) == 256);
static_assert(offsetof(Page, free) == 64);
static_assert(sizeof(FreeBlock) <= kMinAlignment);

constexpr uint64_t kCurrentBias = uint64_t{1} << 62;

}  // namespace xalloc
