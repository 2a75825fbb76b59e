#include "frontend/huge.h"

#include <bit>
#include <cerrno>

#include "backend/huge_ranges.h"
#include "diag/heap_profiler.h"
#include "frontend/block_memory.h"
#include "frontend/heap_upkeep.h"
#include "frontend/huge_cache.h"
#include "frontend/kept_spans.h"
#include "frontend/thread_registry.h"
#include "support/counters.h"
#include "support/fail.h"
#include "support/emergency_heap.h"
#include "platform/os.h"

namespace xalloc {

namespace {

// Where a block aligned to `alignment` starts in its mapping (kHugeHeader).
size_t huge_offset(size_t alignment) {
  return alignment > kOsPageSize ? round_up(kHugeHeader, alignment) : kHugeHeader;  // (0: no alignment asked)
}

// The mapping for a huge block that ends `end` bytes into it. Mappings come
// in eight sizes per doubling, so that a buffer freed and asked for again
// a few pages larger (the next file, frame or request) finds its mapping in
// the cache instead of mapping and faulting in another: a program that
// fills buffers of about 20 and 40 MiB, frees them and asks again, round
// after round, left 172 MiB mapped and resident with page-sized mappings
// against 66 MiB of buffers. Only the pages the program touches become
// resident; the rest of the step is address space. (In secure mode the
// guard page follows the block's last page, wherever that is in the
// mapping: huge_setup.)
size_t huge_mapping_bytes(size_t end) {
  return round_up(end, std::bit_floor(end) / 8) + secure::kGuardBytes;
}

// A huge block of `size` bytes at `offset` in a mapping of `mapping` bytes.
// In secure mode it can use its pages, no more: the guard page follows
// them, and the pages past the guard, up to the end of the mapping, are
// left for a later block that reuses the mapping.
void huge_setup(Segment* segment, size_t mapping, size_t offset, size_t size) {
  segment->kind = SegmentKind::kHuge;
  segment->mapping_size = mapping;
  segment->huge_usable = secure::kEnabled ? round_up(size, kOsPageSize) : mapping - offset;
  segment->next = segment->prev = nullptr;
  Page* page = &segment->pages[0];
  page->set_kind(PageKind::kHuge);
  page->owner = nullptr;
  page->sampled = 0;
  page->start = segment->base() + offset;
  page->slice_count = 0;
  // Every slice of the first granule resolves to the block's descriptor, so
  // lookups never see a null entry.
  for (Page*& slot : segment->page_of_slice) slot = page;
}

// Secure mode: where a huge block's guard page is, right after its pages.
uintptr_t huge_guard_address(const Segment* segment) {
  return segment->pages[0].start + segment->huge_usable;
}

// Secure mode: moves the guard of a huge block whose usable size changes
// to `usable` within its mapping.
void huge_move_guard(Segment* segment, size_t usable) {
  Page* page = &segment->pages[0];
  unguard_after(page, huge_guard_address(segment));
  stats::sub(stats::g_global.large_in_use, segment->huge_usable);
  segment->huge_usable = usable;
  stats::add(stats::g_global.large_in_use, usable);
  guard_after(page, huge_guard_address(segment));
}

// Advises the mapping of a huge block, `mapping` bytes, for huge pages or
// against them, as the blocks let go of lately were written
// (huge_ranges::blocks_dense), before the program first touches its last
// `fresh` bytes: a fresh or purged mapping (all of it: a fresh one before
// its header is written, which would put the first 2 MiB on small pages),
// or the part a grown block gained (its resident pages are dense already).
// Nothing where the advice stands; a mapping never advised keeps the
// kernel's default. Advised ranges count as faults avoided, as huge_ranges
// counts its own.
void advise_block_pages(Segment* segment, size_t mapping, size_t fresh) {
  bool use = huge_ranges::blocks_dense();
  if (use != (segment->huge_advised != 0)) {
    os::advise_huge_pages(reinterpret_cast<void*>(segment->base()), mapping, use);
    segment->huge_advised = use ? 1 : 0;
  }
  if (use) stats::add(stats::g_global.faults_avoided, fresh / kHugePageSize * huge_ranges::kFaultsAvoidedPerRange);
}

// A fresh mapping of `mapping` bytes for a huge block, aligned to the
// segment size, whose range the segment map can take; nullptr if refused.
void* map_huge(size_t mapping) {
  void* memory = os::map_aligned(mapping, kSegmentSize);
  if (memory != nullptr && !segment_map_prepare(reinterpret_cast<uintptr_t>(memory), mapping)) {
    os::unmap(memory, mapping);
    return nullptr;
  }
  return memory;
}

// A mapping from the cache for a block at `offset`, opened for it
// (`opened`: huge_cache_open); null if none fits, or if the kernel refused
// to open it (too many mappings: it is unmapped, the block mapped afresh).
Segment* cached_mapping(size_t mapping, size_t offset, bool* opened) {
  *opened = false;
  Segment* segment = huge_cache_take(mapping);
  if (segment != nullptr && !huge_cache_open(segment, offset, opened)) {
    huge_unmap(segment);
    return nullptr;
  }
  return segment;
}

// A fresh mapping of `mapping` bytes laid out as a huge segment; when the
// OS refuses, again once what xalloc keeps for reuse is given back. Null
// if it refuses again.
Segment* fresh_mapping(size_t mapping) {
  void* memory = map_huge(mapping);
  if (memory == nullptr && release_cached_memory()) memory = map_huge(mapping);
  if (memory == nullptr) return nullptr;
  Segment* segment = segment_at(reinterpret_cast<uintptr_t>(memory));
  segment_protect_header(segment->base());
  segment_map_set(segment->base(), mapping, true);
  stats::add(stats::g_global.mapped, mapping);
  stats::add(stats::g_global.segments, 1);
  stats::add(stats::g_global.committed, mapping);
  return segment;
}

// Sets a mapping taken from the cache up for a block of `size` bytes at
// `offset`. It kept the guard page of its last block: moved if this block
// ends elsewhere, made again if huge_cache_open undid it (`opened`).
void reuse_mapping(Segment* segment, size_t offset, size_t size, bool opened) {
  size_t mapping = segment->mapping_size;
  if (segment->huge_purged) stats::add(stats::g_global.committed, mapping);
  segment->huge_purged = 0;
  uintptr_t old_guard = huge_guard_address(segment);
  huge_setup(segment, mapping, offset, size);
  uintptr_t guard = huge_guard_address(segment);
  if (guard == old_guard && !opened) return;
  unguard_after(&segment->pages[0], old_guard);
  guard_after(&segment->pages[0], guard);
}

// Gives back the end of a huge block's mapping. The 32 MiB granules it
// frees are unmarked in the segment map before the pages go: once they are
// unmapped, another thread may map them and mark them as its own.
bool shrink_mapping(uintptr_t base, size_t old_mapping, size_t mapping) {
  uintptr_t kept_end = round_up(base + mapping, kSegmentSize);
  uintptr_t old_end = base + old_mapping;
  if (kept_end < old_end) segment_map_set(kept_end, old_end - kept_end, false);
  if (os::remap_in_place(reinterpret_cast<void*>(base), old_mapping, mapping)) return true;
  segment_map_set(base, old_mapping, true);
  return false;
}

// Gives the mapping of `segment` `mapping` bytes instead of `old_mapping`:
// in place, or by moving its pages to a fresh aligned reservation instead
// of copying them. The segment where it is now; null if the kernel or the
// segment map refused, nothing changed.
Segment* remap_mapping(Segment* segment, size_t old_mapping, size_t mapping) {
  uintptr_t base = segment->base();
  if (mapping < old_mapping) return shrink_mapping(base, old_mapping, mapping) ? segment : nullptr;
  // The map cannot take the grown range: copied, if memory allows.
  if (!segment_map_prepare(base, mapping)) return nullptr;
  if (os::remap_in_place(reinterpret_cast<void*>(base), old_mapping, mapping)) return segment;
  void* target = map_huge(mapping);
  if (target == nullptr) return nullptr;
  // Once the pages move, another thread may map the old range and mark it
  // as its own: unmark it first.
  segment_map_set(base, old_mapping, false);
  if (os::remap_to(reinterpret_cast<void*>(base), old_mapping, mapping, target))
    return segment_at(reinterpret_cast<uintptr_t>(target));
  segment_map_set(base, old_mapping, true);
  os::unmap(target, mapping);
  return nullptr;
}

// Resizes a huge block of `size` bytes at `offset` to a mapping of
// `mapping` bytes (remap_mapping); null if refused, the block as it was.
void* huge_remap(Segment* segment, size_t offset, size_t mapping, size_t size) {
  size_t old_mapping = segment->mapping_size;
  size_t old_usable = segment->huge_usable;
  // huge_setup clears the descriptor: a sampled block's sample is carried.
  Page* page = &segment->pages[0];
  bool sampled = page->sampled;
  uint64_t sample_bytes = page->sample_bytes, sample_stack = page->sample_stack;
  // Secure mode: the guard page is taken down first and set up again at
  // the end of the resized mapping (or where it was, if nothing moved).
  unguard_after(page, huge_guard_address(segment));
  Segment* moved = remap_mapping(segment, old_mapping, mapping);
  if (moved == nullptr) {
    guard_after(page, huge_guard_address(segment));
    return nullptr;
  }
  segment_map_set(moved->base(), mapping, true);
  stats::add(stats::g_global.mapped, mapping);
  stats::sub(stats::g_global.mapped, old_mapping);
  stats::add(stats::g_global.committed, mapping);
  stats::sub(stats::g_global.committed, old_mapping);
  stats::sub(stats::g_global.large_in_use, old_usable);
  huge_setup(moved, mapping, offset, size);
  guard_after(&moved->pages[0], huge_guard_address(moved));
  stats::add(stats::g_global.large_in_use, moved->huge_usable);
  if (XALLOC_UNLIKELY(sampled)) {
    Page& moved_page = moved->pages[0];
    moved_page.sampled = 1;
    moved_page.sample_bytes = sample_bytes;
    moved_page.sample_stack = sample_stack;
    prof::resized(&moved_page, size);
  }
  return reinterpret_cast<void*>(moved->pages[0].start);
}

}  // namespace

void* huge_alloc(size_t size, size_t alignment, bool zero) {
  if (XALLOC_UNLIKELY(emergency::active())) return emergency::alloc(size, alignment);
  ensure_process_init();
  if (size > kMaxRequest || alignment > kSegmentSize / 2) return fail_enomem();
  size_t offset = huge_offset(alignment);
  size_t mapping = huge_mapping_bytes(offset + size);
  // (A thread's first huge block gives it a heap, which judges its blocks.)
  Heap* heap = thread_heap_or_acquire();
  judge_last_big_block(heap);
  bool opened = false;
  Segment* segment = cached_mapping(mapping, offset, &opened);
  bool fresh = segment == nullptr;
  if (fresh && (segment = fresh_mapping(mapping)) == nullptr) return fail_enomem();
  bool is_zero = fresh || segment->huge_purged;
  size_t bytes = fresh ? mapping : segment->mapping_size;
  if (is_zero) advise_block_pages(segment, bytes, bytes);
  segment->pages[0].is_zero = is_zero ? 1 : 0;
  if (fresh) {
    segment->huge_purged = 0;
    huge_setup(segment, mapping, offset, size);
    guard_after(&segment->pages[0], huge_guard_address(segment));
  } else {
    reuse_mapping(segment, offset, size, opened);
  }
  stats::add(stats::g_global.large_in_use, segment->huge_usable);
  stats::note_in_use();
  void* block = reinterpret_cast<void*>(segment->pages[0].start);
  hand_out_big_block(heap, segment->pages[0].start, segment->huge_usable, false, zero);
  if (zero && !is_zero) zero_reused(block, size);
  return block;
}

void huge_free(Segment* segment) {
  if (XALLOC_UNLIKELY(segment->pages[0].sampled)) prof::forget(&segment->pages[0]);
  forget_big_block(t_heap, segment->pages[0].start);
  huge_ranges::note_block(segment->pages[0].start, segment->huge_usable);
  stats::sub(stats::g_global.large_in_use, segment->huge_usable);
  huge_cache_put(segment);
}

void* huge_resize(Segment* segment, void* ptr, size_t size) {
  if (size <= kMaxLargeSize) return nullptr;  // no longer huge: copied
  size_t offset = static_cast<size_t>(reinterpret_cast<uintptr_t>(ptr) - segment->base());
  size_t mapping = huge_mapping_bytes(offset + size);
  size_t old_mapping = segment->mapping_size;
  if (mapping > old_mapping) {
    // The block as the program wrote it so far says how the part it grows
    // by will be written.
    huge_ranges::note_block(segment->pages[0].start, segment->huge_usable);
    void* moved = huge_remap(segment, offset, mapping, size);
    if (moved == nullptr) return nullptr;
    advise_block_pages(segment_of(reinterpret_cast<uintptr_t>(moved)), mapping, mapping - old_mapping);
    return moved;
  }
  if (mapping * 2 <= old_mapping) return huge_remap(segment, offset, mapping, size);
  // It fits, without much of the mapping idle.
  if (secure::kEnabled && round_up(size, kOsPageSize) > segment->huge_usable)
    huge_move_guard(segment, round_up(size, kOsPageSize));
  if (XALLOC_UNLIKELY(segment->pages[0].sampled)) prof::resized(&segment->pages[0], size);
  return ptr;
}

}  // namespace xalloc
