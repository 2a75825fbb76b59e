// Huge pages where the heap is dense (XALLOC_HUGE_PAGES=auto).
//
// A 2 MiB huge page costs little memory where the heap uses (nearly) all
// of it, and saves a page fault per 4 KiB and TLB misses; where the heap
// is sparse it makes memory the program never touched resident (huge
// pages for every segment: 2.4 times the peak RSS of a 4-thread churn, and
// three times its time in a fragmenting one). So segments are advised
// against huge pages (MADV_NOHUGEPAGE) and each of their 2 MiB ranges is
// judged by its slices in use, on the span allocator's slow paths, once
// the memory in use passes kHeapThreshold (a small program never gets a
// huge page):
//  - a range that a slab is taken from while wholly free and untouched is
//    advised (MADV_HUGEPAGE) before its first touch (also below the
//    threshold, for a thread that holds kThreadSlabThreshold of slabs by
//    itself: a heap that one thread grows fast fills what it opens, and
//    its first 64 MiB were page faults): the span allocator
//    fills the densest ranges first (span_allocator.cpp: take_fitting), so
//    a fresh range is opened only when the rest are full, and it fills
//    next, slab after slab, each carved to its end before the next is
//    taken; its first touch faults in 2 MiB at once. (Not for large
//    blocks, whose pages the program touches as it pleases: a benchmark of
//    blocks written in part went from 27 to 227 MB of peak RSS.)
//  - a range that a slab's take makes dense (kDenseSlices in use), or that
//    is dense when the heap passes the threshold, and whose pages are
//    mostly resident (mincore), is advised and collapsed (MADV_COLLAPSE,
//    without the lock; where the kernel has none, the advice alone lets
//    khugepaged do it later; while a purger's clock runs, by the purger,
//    once the range has stayed dense for a purge delay: span_ranges.cpp);
//  - a huge range keeps its page while kKeepSlices are in use: the purge
//    delay leaves its free slices alone (a purge would split the page to
//    give back a quarter of it at most); the budget and malloc_trim do not;
//  - a purge of any part of a huge range demotes it first
//    (MADV_NOHUGEPAGE), so that khugepaged does not fill the hole again.
// Whole free ranges are purged with one call for the whole span (its
// 2 MiB pages go back whole).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/segment.h"

namespace xalloc::huge_ranges {

constexpr size_t kHeapThreshold = size_t{64} << 20;
// A thread that holds this many bytes of slabs opens the ranges it takes
// slabs from on huge pages (before their first touch) below
// kHeapThreshold: a heap grown this big by one thread fills each range it
// opens, slab after slab, where many threads of a few MiB each leave their
// current slabs' tails untouched (8 threads of 4 MiB: 1.12x the peak RSS
// with ranges opened huge from 16 MiB in use). Over the quick suite, side
// by side: string-vector 0.72x the time, sqlite3 0.84x, batch-round-trip
// 0.84x, fragmentation 1.03x the peak RSS.
constexpr size_t kThreadSlabThreshold = size_t{16} << 20;
constexpr size_t kDenseSlices = 29;  // of 32: at most a tenth free
constexpr size_t kKeepSlices = 24;   // three quarters in use
// A range advised before its first touch takes one fault instead of 512.
constexpr size_t kFaultsAvoidedPerRange = kHugePageSize / kOsPageSize - 1;

inline size_t range_of(size_t slice) { return slice / kRangeSlices; }
inline bool is_huge(const Segment* segment, size_t range) { return (segment->huge_ranges >> range) & 1; }

// Whether ranges are judged now: XALLOC_HUGE_PAGES=auto without commit on
// demand, `in_use_bytes` at least kHeapThreshold, and the kernel willing
// (asked once, the first time the rest holds).
bool active(size_t in_use_bytes);
// Whether a slab taken now may open a fresh range on huge pages: active(),
// or for `big_taker`, a thread that holds kThreadSlabThreshold of slabs.
// (Only active() also collapses ranges made dense.)
bool opens_huge(size_t in_use_bytes, bool big_taker);

// What a take that leaves `used_after` slices of a range in use does to it.
// `fresh`: the range had none in use and none resident before.
enum class Promotion { kNone, kBeforeTouch, kCollapse };
Promotion promotion_for_take(bool huge, size_t used_after, bool fresh);

// Whether the purge delay leaves the free slices of `range` alone.
inline bool keeps_page(const Segment* segment, size_t range) {
  return is_huge(segment, range) && segment->range_used[range] >= kKeepSlices;
}

// Slices of [first, first+count) in use from now on / no longer.
void note_taken(Segment* segment, size_t first, size_t count);
void note_released(Segment* segment, size_t first, size_t count);

// Bitmask of the ranges [first, first+count) overlaps.
uint32_t ranges_of(size_t first, size_t count);

// Advises `range` MADV_HUGEPAGE and marks it huge (under the span
// allocator's lock, so that the advice follows the marks).
void promote(Segment* segment, size_t range);
// The free span [*first, *end) to purge for the delay: less its ends that
// lie in ranges that keep their page (possibly nothing: *first >= *end).
void trim_kept(const Segment* segment, size_t* first, size_t* end);
// Before [first, end) is purged: the huge ranges it overlaps are advised
// MADV_NOHUGEPAGE and unmarked (under the lock).
void demote(Segment* segment, size_t first, size_t end);

// Whether at least kDenseSlices' share of the range's pages are resident:
// collapsing it then costs little memory.
bool mostly_resident(const Segment* segment, size_t range);

// Huge blocks (frontend/huge.cpp) have mappings of their own, which huge
// pages suit where the program writes a block in full, and do not where it
// writes a few bytes here and there (a byte every 256 KiB, as
// mimalloc-bench's malloc-large does, would make 512 times that resident).
// Judged from the blocks the program lets go of or grows, and from the
// last big block each thread took, when it takes the next
// (frontend/block_memory.h): the 2 MiB range in the middle of each, mostly
// resident or mostly not (one mincore call; no verdict from memory no
// longer mapped).
void note_block(uintptr_t start, size_t bytes);
// Whether a huge block's mapping, fresh or purged, gets huge pages: the
// last block noted was dense (XALLOC_HUGE_PAGES=auto, no commit on demand,
// the kernel willing).
bool blocks_dense();

// Ranges to collapse once the lock is released.
struct Collapses {
  static constexpr size_t kMax = 32;
  uintptr_t start[kMax];
  size_t count = 0;
  bool full() const { return count == kMax; }
  void add(uintptr_t range_start) {
    if (!full()) start[count++] = range_start;
  }
  void run();
};

}  // namespace xalloc::huge_ranges
