// Segments: the naturally aligned regions all memory comes from.
//
// A segment is kSegmentSize bytes aligned to kSegmentSize. Its first slices
// hold this header; the other slices form spans (slabs, large blocks or
// free space) whose descriptors live in `pages`. Any address inside the
// first granule finds its descriptor by arithmetic: mask to the segment,
// shift to the slice, one load from page_of_slice. Huge blocks are segments
// of their own, possibly longer than one granule.
//
// The segment map (one byte per granule of the 47-bit address space) says
// which granules are xalloc's, so free() can tell its pointers from foreign
// ones without reading memory that might not exist.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/config.h"
#include "meta/page.h"
#include "meta/secure.h"

namespace xalloc {

// A segment's 2 MiB ranges: the kernel's huge pages (x86-64).
constexpr size_t kHugePageShift = 21;
constexpr size_t kHugePageSize = size_t{1} << kHugePageShift;
constexpr size_t kRangeSlices = kHugePageSize / kSliceSize;  // 32
constexpr size_t kRangesPerSegment = kSlicesPerSegment / kRangeSlices;  // 16
static_assert(kRangesPerSegment <= 16 && kRangeSlices <= 255, "range bookkeeping fits its fields");

enum class SegmentKind : uint32_t { kNormal = 1, kHuge = 2 };

// Where the header starts in its segment: at the beginning, or in secure
// mode after a guard page (so an overflow from the segment below cannot
// reach it).
inline constexpr size_t kSegmentHeaderOffset = secure::kGuardBytes;

struct Segment {
  SegmentKind kind;
  uint32_t used_slices;       // normal: slices not in free spans (the header counts)
  size_t mapping_size;        // bytes mapped for this segment
  size_t huge_usable;         // huge: bytes the block can hold
  Segment* next;              // span allocator's segment list / huge cache
  Segment* prev;
  uint64_t freed_at;          // huge cache: when the block was freed (ms)
  uint8_t huge_purged;        // huge cache: its pages were given back
  uint8_t huge_sealed;        // huge cache, secure mode or commit on demand: and made inaccessible (frontend/huge_cache.cpp)
  uint8_t huge_advised;       // huge: its mapping is advised huge pages (huge_ranges::blocks_dense)
  uint32_t huge_open_from;    // huge, sealed once: offset where the accessible bytes begin (0: all)
  // Slices that may be resident (touched since the last purge): a span with
  // none of its bits set reads as zero.
  uint64_t dirty[kSlicesPerSegment / 64];
  // With commit on demand (options.h): slices that are read-write - every
  // dirty one, and clean ones committed ahead of use; the rest are
  // inaccessible and off the commit charge.
  uint64_t committed[kSlicesPerSegment / 64];
  // Slices purged to keep free memory within the dirty budget and not
  // taken again since, as of review period `budget_purge_epoch` of the
  // span allocator's purge policy: a span taken over them soon after tells
  // it that the budget is too tight for the program (purge_policy.cpp).
  uint64_t budget_purged[kSlicesPerSegment / 64];
  // (A cached huge block: the period its mapping was purged for the budget
  // in, 0 if it was not: frontend/huge_cache.cpp.)
  uint32_t budget_purge_epoch;
  // XALLOC_HUGE_PAGES=auto (huge_ranges.h): slices in use in each 2 MiB
  // range (the header's count), and the ranges advised MADV_HUGEPAGE.
  uint8_t range_used[kRangesPerSegment];
  uint16_t huge_ranges;
  Page* page_of_slice[kSlicesPerSegment];
  // 256 bytes each, on a 256-byte boundary (page.h): a descriptor's two
  // lines are one of the aligned pairs that the processors' adjacent-line
  // prefetch fetches together, so a free that misses on the first line (the
  // owner) has the second (the free list) coming too, and the pair never
  // holds a line of a neighbouring descriptor.
  Page pages[kSlicesPerSegment];

  // The first byte of the segment (its mapping).
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(this) - kSegmentHeaderOffset; }
  size_t slice_index(const Page* page) const { return static_cast<size_t>(page - pages); }
  uintptr_t slice_address(size_t index) const { return base() + (index << kSliceShift); }
};

static_assert(kSegmentHeaderOffset + sizeof(Segment) + secure::kGuardBytes <= kHeaderBytes,
              "the header (and its guard pages) must fit in its slices");

// ---------------------------------------------------------------------------
// Segment map

constexpr size_t kSegmentMapEntries = size_t{1} << (kAddressBits - kSegmentShift);

enum : uint8_t {
  kMapUnused = 0,
  kMapSegmentHead = 1,  // a segment's first granule: pointers here are looked up
  kMapHugeTail = 2,     // a later granule of a huge segment
};

extern uint8_t g_segment_map[kSegmentMapEntries];

// The segment map's index of `address`: the base of its granule shifted
// right (page_at_index).
inline uintptr_t segment_map_index(uintptr_t address) { return address >> kSegmentShift; }

inline uint8_t segment_map_entry_at(uintptr_t index) {
  if (index >= kSegmentMapEntries) return kMapUnused;
#if defined(XALLOC_SANITIZED)
  return __atomic_load_n(&g_segment_map[index], __ATOMIC_RELAXED);
#else
  // A plain load lets the compiler fold it into the comparison; entries of
  // live blocks' granules never change while the block is live.
  return g_segment_map[index];
#endif
}

inline uint8_t segment_map_entry(uintptr_t address) { return segment_map_entry_at(segment_map_index(address)); }

// The header of the segment whose mapping starts at `base`.
inline Segment* segment_at(uintptr_t base) { return reinterpret_cast<Segment*>(base + kSegmentHeaderOffset); }
inline Segment* segment_of(uintptr_t address) { return segment_at(address & ~kSegmentMask); }

// The slice-map entry of the slice holding `address`.
inline Page* const* page_slot_of(const Segment* segment, uintptr_t address) {
  return &segment->page_of_slice[(address - segment->base()) >> kSliceShift];
}

inline Page* page_of(const Segment* segment, uintptr_t address) { return *page_slot_of(segment, address); }

// page_of(segment_of(address), address) for the free path, which has the
// segment map's index in a register: the slice-map entry lies at base +
// ((address - base) >> kSliceShift) * 8, and with base = map_index <<
// kSegmentShift that is map_index * kPageSlotStride + (address >>
// kSliceShift) * 8: one multiplication and a shift into the load's scaled
// index (the base and the slice from it are four instructions). The
// multiplication is written out: the compiler would turn it into shifts
// and a subtraction.
inline constexpr uintptr_t kPageSlotStride = kSegmentSize - kSlicesPerSegment * sizeof(Page*);
static_assert(kPageSlotStride < (uintptr_t{1} << 31), "an imul immediate");
inline Page* page_at_index(uintptr_t map_index, uintptr_t address) {
  uintptr_t scaled;
#if defined(__x86_64__)
  asm("imulq %2, %1, %0" : "=r"(scaled) : "r"(map_index), "i"(kPageSlotStride));
#else
  scaled = map_index * kPageSlotStride;
#endif
  uintptr_t slot = scaled + kSegmentHeaderOffset + offsetof(Segment, page_of_slice) +
                   (address >> kSliceShift) * sizeof(Page*);
  return *reinterpret_cast<Page* const*>(slot);
}

// Null when xalloc does not own the address (or it lies in a huge tail).
inline Page* lookup_page(uintptr_t address) {
  if (segment_map_entry(address) != kMapSegmentHead) return nullptr;
  return page_of(segment_of(address), address);
}

// Commit on demand: the segment map's 4 MiB, which the kernel charges as
// writable data from the start, become uncharged zero pages (at start-up,
// before any segment is registered), made writable a page - 4096 granules,
// 128 GiB of address space - at a time by segment_map_prepare, which every
// new mapping's range goes through before segment_map_set registers it.
void segment_map_init();
// False when the kernel refuses (at the commit limit): the range cannot be
// registered.
bool segment_map_prepare(uintptr_t base, size_t size);
void segment_map_set(uintptr_t base, size_t size, bool present);

// Maps and initialises a normal segment (all slices free but the header).
Segment* segment_create();
// Secure mode: puts guard pages around a header.
void segment_protect_header(uintptr_t base);
void segment_destroy(Segment* segment);

// With commit on demand (options.h) only a segment's committed slices are
// accessible. segment_commit makes [first, first+count) accessible before
// its slices are marked dirty, and up to a MiB more of the free span it is
// taken from, which ends at `free_end` (one system call for a run of
// slabs; less ahead while the segment holds little); false when the kernel
// refuses (at the commit limit). Without commit on demand every slice is
// accessible.
bool segment_commit(Segment* segment, size_t first, size_t count, size_t free_end);
// Gives the pages of a free range back to the OS: purged, and decommitted
// with commit on demand.
void release_pages(uintptr_t start, size_t bytes);

// Dirty-slice bookkeeping (callers hold the span allocator's lock).
bool segment_range_is_clean(const Segment* segment, size_t first, size_t count);
// Marks the range dirty; returns how many of its slices were clean.
size_t segment_mark_dirty(Segment* segment, size_t first, size_t count);
// Slices of the range that may be resident.
size_t segment_dirty_count(const Segment* segment, size_t first, size_t count);
// Marks the dirty parts of [first, first+count) clean, as the caller is
// about to purge the range (with commit on demand, to decommit it all:
// none of it stays committed); returns their bytes. `budget_epoch`: when not
// 0, the purge is for the span allocator's budget, in that review period,
// and the slices are noted as such.
size_t segment_mark_purged(Segment* segment, size_t first, size_t count, uint32_t budget_epoch = 0);
// The slices of [first, first+count) purged for the budget in period
// `epoch` or the one before, now taken again; forgets them.
size_t segment_take_budget_purged(Segment* segment, size_t first, size_t count, uint32_t epoch);

}  // namespace xalloc
