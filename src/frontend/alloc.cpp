// The allocation API beyond the inline fast paths: sizes above 1 KiB,
// zeroed and aligned blocks, realloc, and every free that is not a
// same-thread slab free (remote, large, huge, foreign, misuse).
#include "frontend/alloc.h"

#include <cerrno>
#include <cstring>

#include "frontend/block_memory.h"
#include "frontend/borrow.h"
#include "support/debug.h"
#include "support/emergency_heap.h"
#include "frontend/sampling.h"
#include "frontend/huge.h"
#include "frontend/huge_cache.h"
#include "frontend/kept_spans.h"
#include "frontend/large.h"
#include "support/fail.h"
#include "support/options.h"
#include "frontend/heap_upkeep.h"
#include "frontend/inbox.h"
#include "frontend/outbox.h"
#include "frontend/purger.h"
#include "backend/huge_ranges.h"
#include "backend/slab_pool.h"
#include "backend/span_allocator.h"
#include "support/counters.h"
#include "frontend/thread_registry.h"

namespace xalloc {

namespace {

// The huge segment of which `address` lies in a later granule (a rare
// lookup: an interior pointer past a huge block's first 32 MiB); null if
// the mapping went meanwhile (a free racing the lookup).
const Segment* huge_segment_of_tail(uintptr_t address) {
  uintptr_t granule = address & ~(kSegmentSize - 1);
  while (segment_map_entry(granule) == kMapHugeTail) granule -= kSegmentSize;
  return segment_map_entry(granule) == kMapSegmentHead ? segment_of(granule) : nullptr;
}

// Not a cached mapping, whose block was freed. (Every slice of a huge
// segment maps to its block's descriptor.)
bool holds_live_huge_block(const Segment* segment) {
  return segment != nullptr && segment->page_of_slice[0]->kind() == PageKind::kHuge;
}

XALLOC_INLINE void* alloc_from_class(Heap* heap, unsigned cls) {
  Page* page = heap->current[cls];
  FreeBlock* block = page->free;
  if (XALLOC_LIKELY(block != nullptr)) return slab_pop(page, block);
  return heap_alloc_slow(heap, cls);
}

// What a misuse report says, by the call that found it.
struct MisuseWords {
  const char* not_start;  // an interior pointer
  const char* into_free;  // a pointer into memory that holds no block
  const char* freed;      // the start of a block freed already
};
constexpr MisuseWords kFreeWords{"invalid free (not the start of a block)", "invalid free (pointer into free memory)",
                                 "double free"};
constexpr MisuseWords kReallocWords{"invalid realloc (not the start of a block)",
                                    "invalid realloc (pointer into free memory)", "realloc of a freed block"};

// `address` is not a carved block's start in `page`, a slab: says which.
[[noreturn]] XALLOC_NOINLINE void report_slab_address(const Page* page, const void* ptr, const MisuseWords& words,
                                                     Caller caller) {
  if (!is_block_start(page, reinterpret_cast<uintptr_t>(ptr)))
    report_misuse(words.not_start, ptr, page->block_size(), caller);
  report_misuse(words.into_free, ptr, page->block_size(), caller);
}

// Reports `ptr` unless it starts a live block of `page`, a large, huge or
// free span (of `segment`).
void check_span_block(const Segment* segment, const Page* page, const void* ptr, const MisuseWords& words,
                      Caller caller) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  switch (page->kind()) {
    case PageKind::kLarge:
      if (address != page->start) report_span_misuse(words.not_start, ptr, "large block", page->large_usable, caller);
      // A span kept for the thread's next large block or sample (kept_spans.h)
      // is free: it has no usable bytes.
      if (page->large_usable == 0) report_span_misuse(words.freed, ptr, "large block", 0, caller);
      return;
    case PageKind::kHuge:
      if (address != page->start) report_span_misuse(words.not_start, ptr, "huge block", segment->huge_usable, caller);
      return;
    default:
      // A freed large or huge block keeps its start in its descriptor until
      // the space is reused or merged.
      if (is_free_kind(page->kind()) && address == page->start) report_misuse(words.freed, ptr, 0, caller);
      report_misuse(words.into_free, ptr, 0, caller);
  }
}

void free_foreign(void* ptr, Caller caller) {
  if (emergency::owns(ptr)) return;
  // The options say whether to report, and the report's stack printer is
  // registered at start-up: a process's first call may be this free.
  ensure_process_init();
  auto address = reinterpret_cast<uintptr_t>(ptr);
  if (segment_map_entry(address) == kMapHugeTail) {
    if (const Segment* segment = huge_segment_of_tail(address)) {
      if (holds_live_huge_block(segment))
        report_span_misuse(kFreeWords.not_start, ptr, "huge block", segment->huge_usable, caller);
      report_misuse(kFreeWords.into_free, ptr, 0, caller);
    }
  }
  if (g_options.abort_on_invalid_free)
    report_misuse("invalid free (pointer not allocated by xalloc)", ptr, 0, caller);
}

XALLOC_NOINLINE void report_slab_misuse(Page* page, FreeBlock* block, Caller caller) {
  if (!is_carved_block_start(page, reinterpret_cast<uintptr_t>(block), page->carved_limit_now()))
    report_slab_address(page, block, kFreeWords, caller);
  // The check that failed read the marker or (secure mode) the canary. A
  // marker gone by now, with the canary intact, means the owner handed the
  // block out again after the first free. A pooled slab (no owner) has no
  // block in use.
  bool canary_broken = secure::kEnabled && page->owner != nullptr && block->marker != free_marker(block) &&
                       !canary_intact(page, block);
  if (!canary_broken) report_misuse(kFreeWords.freed, block, page->block_size(), caller);
  report_misuse("heap overflow (canary at the end of the block overwritten) detected at free", block,
                page->block_size(), caller);
}

// A checked slab block freed by its owner through the out-of-line path.
XALLOC_NOINLINE void free_slab_block_slow(Heap* heap, Page* page, FreeBlock* block) {
  heap_free_owned(heap, page, block);
}

XALLOC_NOINLINE void free_span(Segment* segment, Page* page, void* ptr, Caller caller) {
  check_span_block(segment, page, ptr, kFreeWords, caller);
  if (page->kind() == PageKind::kLarge) return large_free(page);
  huge_free(segment);
}

// A span without an owner: a large, huge or free span, or a slab in the
// slab pool.
XALLOC_NOINLINE void free_unowned(Page* page, FreeBlock* block, Caller caller) {
  if (page->kind() == PageKind::kSlab) report_slab_misuse(page, block, caller);
  auto address = reinterpret_cast<uintptr_t>(block);
  free_span(segment_of(address), page, block, caller);
}

// Class of a size for statistics: slab classes, then large, then huge.
unsigned watch_class(size_t size) {
  if (size <= kMaxSlabSize) return class_of(size);
  return size <= kMaxLargeSize ? kNumClasses : kNumClasses + 1;
}

// Whether allocations are watched is known once the process has started:
// the first allocation of a thread (of the process) may come here first.
bool watching(const Heap* heap) {
  if (XALLOC_UNLIKELY(heap == &g_empty_heap)) ensure_process_init();
  return prof::watching();
}

// The heap a watched allocation is counted in: a thread's first
// allocation may be a large one, before it has a heap.
Heap* watched_heap(Heap* heap) {
  if (heap != &g_empty_heap || emergency::active()) return heap;
  Heap* acquired = thread_heap_acquire();
  return acquired != nullptr ? acquired : heap;
}

// Counts a watched allocation of `cls` (watch_class) in the heap it
// belongs to, which `heap` becomes, and samples it when due: the sampled
// block, or null to go on with the ordinary allocation.
void* watch_allocation(Heap*& heap, unsigned cls, size_t size, size_t alignment) {
  heap = watched_heap(heap);
  return heap != &g_empty_heap ? prof::watch(heap, cls, size, alignment, size) : nullptr;
}

XALLOC_NOINLINE void* alloc_medium_watched(Heap* heap, unsigned cls, size_t size) {
  if (watching(heap)) {
    if (void* sampled = watch_allocation(heap, cls, size, 0)) return sampled;
  }
  return alloc_from_class(heap, cls);
}

// Slab classes above kMaxSmallSize when the class's current slab is empty,
// or allocations are watched (statistics, profiler), or the thread has no
// heap yet. The profiler without statistics (windowed) comes here for
// every allocation of these sizes: it counts them down and takes the block
// with no more than that, and no stack frame, until a sample is due.
XALLOC_NOINLINE void* alloc_medium_slow(Heap* heap, unsigned cls, size_t size) {
  // First, before three more calls reach heap_alloc_slow, which tries it
  // too: the repeated check when it fails (a quarter of the calls in
  // glibc-thread) costs less than the calls it saves when it succeeds
  // (callgrind, whole process: 1.2% more instructions without this line).
  if (void* block = heap_switch_slab(heap, cls)) return block;
  // The class's borrowed list ran dry: serve the current slab again.
  if (borrowed_list_ran_dry(heap, cls)) heap_serve(heap, cls);
  if (prof::windowed() && heap != &g_empty_heap) {
    int64_t left = heap->sample_countdown - static_cast<int64_t>(size);
    if (XALLOC_LIKELY(left > 0)) {
      heap->sample_countdown = left;
      return alloc_from_class(heap, cls);
    }
  }
  return alloc_medium_watched(heap, cls, size);
}

XALLOC_NOINLINE void* alloc_beyond_slabs(Heap* heap, size_t size) {
  if (XALLOC_UNLIKELY(watching(heap))) {
    if (void* sampled = watch_allocation(heap, watch_class(size), size, 0)) return sampled;
  }
  void* block = size <= kMaxLargeSize ? large_alloc(size, 0, false) : huge_alloc(size, 0, false);
  purger_start_if_due();
  return block;
}

}  // namespace

// The thread without a heap reads g_empty_page's empty list and so takes
// the slow path, which also answers for watched allocations.
void* alloc_generic(size_t size, Heap* heap) noexcept {
  if (XALLOC_LIKELY(size <= kMaxSlabSize)) {
    unsigned cls = medium_class_of(size);
    Page* page = heap->serving[cls];
    FreeBlock* block = page->free;
    if (XALLOC_LIKELY(block != nullptr)) return slab_pop(page, block);
    return alloc_medium_slow(heap, cls, size);
  }
  return alloc_beyond_slabs(heap, size);
}

void free_generic(void* ptr, Caller caller) noexcept {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  if (segment_map_entry(address) != kMapSegmentHead) {
    if (ptr != nullptr) free_foreign(ptr, caller);
    return;
  }
  Segment* segment = segment_of(address);
  free_not_local(ptr, page_of(segment, address), caller, t_heap);
}

// The common case is another thread's slab block, kept to as few
// instructions as it takes: a thread that frees blocks allocated elsewhere
// mostly misses the cache on each block's marker, and the fewer
// instructions lie between two such loads, the more of them the processor
// keeps in flight at once (remote_free.h).
//
// A block that fails a check is reported at once: looking again could find
// it handed out by its owner in between (a double free racing the owner's
// malloc) and pass it. The place check runs in every build; only the
// marker is XALLOC_MISUSE_CHECKS's. A thread without a heap stages nothing
// (g_empty_heap's stage is always full): outbox_add_full gives it one.
void free_not_local(void* ptr, Page* page, Caller caller, Heap* heap) noexcept {
  auto* block = static_cast<FreeBlock*>(ptr);
  Heap* owner = page->owner;
  // Only slabs have owners; a slab without one is in the slab pool, where
  // every block is free.
  if (XALLOC_UNLIKELY(owner == nullptr)) return free_unowned(page, block, caller);
  XALLOC_CHECK(page->kind() == PageKind::kSlab);
  if (XALLOC_UNLIKELY(!is_carved_block_start(page, reinterpret_cast<uintptr_t>(ptr), page->carved_limit_now())) ||
      XALLOC_UNLIKELY(!slab_mark_free(page, block, owner == heap)))
    return report_slab_misuse(page, block, caller);
  if (XALLOC_UNLIKELY(owner == heap)) return free_slab_block_slow(heap, page, block);
  outbox_add(heap->outbox, owner, block, page->size_class);
}

void* alloc_zeroed(size_t size) {
  if (size <= kMaxSmallSize) {
    void* block = alloc(size);
    if (block != nullptr) memset(block, 0, size);
    return block;
  }
  shared_count::malloc_done();  // alloc() counts the small ones
  Heap* heap = t_heap;
  if (XALLOC_UNLIKELY(watching(heap))) {
    if (void* sampled = watch_allocation(heap, watch_class(size), size, 0)) return memset(sampled, 0, size);
  }
  if (size <= kMaxSlabSize - secure::kCanaryBytes)
    return heap_alloc_zeroed(heap, class_of(size + secure::kCanaryBytes), size);
  if (size <= kMaxLargeSize) return large_alloc(size, 0, true);
  return huge_alloc(size, 0, true);
}

void* alloc_aligned_generic(size_t size, size_t alignment) noexcept {
  if (alignment <= kMinAlignment) return alloc(size);
  shared_count::malloc_done();
  Heap* heap = t_heap;
  if (XALLOC_UNLIKELY(watching(heap)) && size <= kMaxRequest) {
    if (void* sampled = watch_allocation(heap, watch_class(size), size, alignment)) return sampled;
  }
  if (size <= kMaxSlabSize - secure::kCanaryBytes && alignment <= kMaxSlabAlignment) {
    unsigned cls = aligned_class_of(size + secure::kCanaryBytes, alignment);
    if (cls < kNumClasses) return alloc_from_class(heap, cls);
  }
  if (size > kMaxRequest) return fail_enomem();
  if (size <= kMaxLargeSize) return large_alloc(size, alignment, false);
  return huge_alloc(size, alignment, false);
}

namespace {

// A block that cannot be resized where it is moves: a new block gets the
// bytes both have, and the old one is freed. Without memory for the new
// one: null (errno ENOMEM), the old block left intact. Out of line, so that
// realloc's in-place cases need no stack frame.
XALLOC_NOINLINE void* realloc_by_moving(void* ptr, size_t old_size, size_t size, Caller caller) {
  void* moved = alloc(size);
  if (moved == nullptr) return nullptr;
  size_t copied = size < old_size ? size : old_size;
  if (size > kMaxSlabSize) populate_for_copy(moved, copied);
  memcpy(moved, ptr, copied);
  free(ptr, caller);
  return moved;
}

// Large and huge blocks are resized in place when they can be (large.h,
// huge.h). Out of line for the same reason: realloc only jumps here.
XALLOC_NOINLINE void* realloc_large(Page* page, void* ptr, size_t size, Caller caller) {
  if (large_resize_in_place(page, size)) return ptr;
  // Grown into a huge block: judged as written so far, as a huge block
  // that grows is (huge_ranges.h), before the huge block is mapped.
  if (size > kMaxLargeSize) huge_ranges::note_block(reinterpret_cast<uintptr_t>(ptr), page->large_usable);
  return realloc_by_moving(ptr, page->large_usable, size, caller);
}

XALLOC_NOINLINE void* realloc_huge(Segment* segment, void* ptr, size_t size, Caller caller) {
  if (void* resized = huge_resize(segment, ptr, size)) return resized;
  return realloc_by_moving(ptr, segment->huge_usable, size, caller);
}

}  // namespace

void* realloc(void* ptr, size_t size, Caller caller) {
  if (ptr == nullptr) return alloc(size);
  if (size == 0) {
    // glibc frees and returns NULL (C23 leaves it undefined).
    free(ptr, caller);
    return nullptr;
  }
  if (size > kMaxRequest) return fail_enomem();
  auto address = reinterpret_cast<uintptr_t>(ptr);
  if (segment_map_entry(address) != kMapSegmentHead) {
    if (emergency::owns(ptr)) return emergency::realloc(ptr, size);
    free_foreign(ptr, caller);  // reports, unless XALLOC_ABORT_ON_INVALID_FREE=0
    errno = EINVAL;
    return nullptr;
  }
  Segment* segment = segment_of(address);
  Page* page = page_of(segment, address);
  switch (page->kind()) {
    case PageKind::kSlab: {
      if (XALLOC_UNLIKELY(!is_carved_block_start(page, address, page->carved_limit_now())))
        report_slab_address(page, ptr, kReallocWords, caller);
      if (XALLOC_MISUSE_CHECKS && static_cast<FreeBlock*>(ptr)->marker == free_marker(static_cast<FreeBlock*>(ptr)))
        report_misuse(kReallocWords.freed, ptr, page->block_size(), caller);
      size_t old_size = page->block_size() - secure::kCanaryBytes;
      // Stay in place unless the block would be less than half used.
      if (size <= old_size && (size > old_size / 2 || old_size <= 16)) return ptr;
      return realloc_by_moving(ptr, old_size, size, caller);
    }
    default:
      check_span_block(segment, page, ptr, kReallocWords, caller);
      if (page->kind() == PageKind::kLarge) return realloc_large(page, ptr, size, caller);
      return realloc_huge(segment, ptr, size, caller);
  }
}

namespace {

// An interior pointer has the bytes up to its block's usable end; one past
// that end (in a secure block's canary, in the slack after a large or huge
// block, in a freed block whose span its heap keeps) has none.
size_t bytes_up_to(uintptr_t address, uintptr_t usable_end) {
  return address < usable_end ? usable_end - address : 0;
}

size_t huge_usable_from(const Segment* segment, uintptr_t address) {
  if (!holds_live_huge_block(segment)) return 0;
  return bytes_up_to(address, segment->page_of_slice[0]->start + segment->huge_usable);
}

}  // namespace

size_t usable_size(const void* ptr, Caller caller) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  uint8_t entry = segment_map_entry(address);
  if (entry == kMapHugeTail) return huge_usable_from(huge_segment_of_tail(address), address);
  if (entry != kMapSegmentHead) {
    if (ptr == nullptr || emergency::owns(ptr)) return 0;
    ensure_process_init();  // as in free_foreign
    if (g_options.abort_on_invalid_free)
      report_misuse("malloc_usable_size of a pointer not allocated by xalloc", ptr, 0, caller);
    return 0;
  }
  Segment* segment = segment_of(address);
  Page* page = page_of(segment, address);
  switch (page->kind()) {
    case PageKind::kSlab: {
      uintptr_t block = address - (address - page->start) % page->block_size();
      return bytes_up_to(address, block + page->block_size() - secure::kCanaryBytes);
    }
    case PageKind::kLarge:
      return bytes_up_to(address, page->start + page->large_usable);
    case PageKind::kHuge:
      return huge_usable_from(segment, address);
    default:
      return 0;
  }
}

bool owns(const void* ptr) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  uint8_t entry = segment_map_entry(address);
  if (entry == kMapHugeTail) return holds_live_huge_block(huge_segment_of_tail(address));
  if (entry != kMapSegmentHead) return false;
  PageKind kind = page_of(segment_of(address), address)->kind();
  return kind == PageKind::kSlab || kind == PageKind::kLarge || kind == PageKind::kHuge;
}

size_t trim() {
  // It takes the allocator's locks: the fork handlers that release them in
  // a child must be registered first, even in a process whose first call
  // this is (a fork while another thread trimmed left the child's span
  // allocator locked for good).
  ensure_process_init();
  Heap* heap = t_heap;
  if (heap != &g_empty_heap) {
    borrowed_return(heap);
    outbox_flush(heap->outbox);
    heap_drain_inbox(heap);
    heap_release_spares(heap);
  }
  orphans_collect_all();
  return release_caches();
}

}  // namespace xalloc
