#include "backend/span_allocator.h"

#include <bit>

#include "support/debug.h"
#include "meta/slab.h"
#include "support/hooks.h"
#include "support/options.h"
#include "platform/os.h"
#include "support/counters.h"

namespace xalloc {

XALLOC_FORK_DATA constinit SpanAllocator g_spans;

namespace {

inline Segment* segment_of_page(const Page* page) { return segment_of(reinterpret_cast<uintptr_t>(page)); }

void purge_pages(const Page* span) { release_pages(span->start, span->span_bytes()); }

// Slices in use in the 2 MiB range that a free span's first slice lies in:
// taking from the densest range leaves sparse ranges to empty and go back
// whole, and fills a range for a huge page (huge_ranges.h).
size_t front_density(const Page* span) {
  const Segment* segment = segment_of_page(span);
  return segment->range_used[huge_ranges::range_of(segment->slice_index(span))];
}

// Spans of a bin weighed for their density before one is chosen.
constexpr size_t kDensityCandidates = 4;

// Every free reads the slice map, and eight entries share a cache line:
// the slabs of other threads sit in the slices next to a span being taken
// or given back. An entry is written only when it changes - a span freed
// and taken again keeps its head, and so its entries - so that a thread
// taking and freeing a large block over and over does not take the line
// from the threads freeing into the neighbouring slabs at every call.
void set_slice(Segment* segment, size_t index, Page* page) {
  if (segment->page_of_slice[index] != page) segment->page_of_slice[index] = page;
}

void map_slices(Segment* segment, size_t first, size_t count, Page* page) {
  for (size_t i = first; i < first + count; ++i) set_slice(segment, i, page);
}

// A descriptor that stops heading a span of its own: lookups that still
// reach it see free memory.
void mark_absorbed(Page* page) {
  page->set_kind(PageKind::kFree);
  page->owner = nullptr;
}

// Slice `last` ends the span headed at `head` and becomes an inner slice of
// a merged free span. Its entry points back to the head, which may break
// the slice map's order (span_allocator.h) unless the entry before it
// points there too (a span that was in use maps every slice to its head,
// and stays in order): then it points at its own descriptor instead.
void demote_last_slice(Segment* segment, size_t head, size_t last) {
  if (last == head || segment->page_of_slice[last - 1] == &segment->pages[head]) return;
  mark_absorbed(&segment->pages[last]);
  set_slice(segment, last, &segment->pages[last]);
}

// Fresh fields of a descriptor becoming the head of a span in use (it may
// hold anything a former span left in it).
void init_used_span(Segment* segment, Page* span, size_t first, size_t slices, PageKind kind) {
  span->free = nullptr;
  span->needed = 0;
  span->owner = nullptr;
  span->slice_count = static_cast<uint16_t>(slices) & 0xfff;
  span->start = segment->slice_address(first);
  span->next = span->prev = nullptr;
  span->set_state(SlabState::kDetached);
  span->sampled = 0;
  span->set_kind(kind);
  map_slices(segment, first, slices, span);
}

}  // namespace

// Bins hold free spans by length: exact for 1..8 slices, then four bins per
// power of two. A span in bin b is at least as long as bin b's minimum.
size_t SpanAllocator::bin_of(size_t slices) {
  if (slices <= 8) return slices - 1;
  unsigned e = static_cast<unsigned>(std::bit_width(slices)) - 1;
  return 8 + (e - 3) * 4 + ((slices >> (e - 2)) & 3);
}

void SpanAllocator::insert_free(Segment* segment, size_t first, size_t count, uint64_t freed_at, Map map) {
  Page* span = &segment->pages[first];
  span->set_kind(PageKind::kFree);
  span->set_state(SlabState::kDetached);
  span->owner = nullptr;
  span->free = nullptr;
  span->needed = 0;
  span->slice_count = static_cast<uint16_t>(count) & 0xfff;
  span->start = segment->slice_address(first);
  span->freed_at = freed_at;
  set_slice(segment, first, span);
  set_slice(segment, first + count - 1, span);
  if (map == Map::kRest) {
    // The rest of a free span whose front was taken: its entries that point
    // before it (into the span now in use) form a prefix; they become ours.
    for (size_t i = first + 1; i < first + count && segment->page_of_slice[i] < span; ++i)
      segment->page_of_slice[i] = span;
  }

  size_t bin = bin_of(count);
  span->prev = nullptr;
  span->next = bins_[bin];
  if (span->next != nullptr) span->next->prev = span;
  bins_[bin] = span;
  nonempty_bins_ |= 1u << bin;
  if (count == kPayloadSlices) ++free_segments_;
}

void SpanAllocator::remove_free(Page* span) {
  size_t bin = bin_of(span->slice_count);
  if (span->prev != nullptr) {
    span->prev->next = span->next;
  } else {
    bins_[bin] = span->next;
    if (bins_[bin] == nullptr) nonempty_bins_ &= ~(1u << bin);
  }
  if (span->next != nullptr) span->next->prev = span->prev;
  span->next = span->prev = nullptr;
  if (span->slice_count == kPayloadSlices) --free_segments_;
}

Page* SpanAllocator::take_fitting(size_t slices) {
  size_t bin = bin_of(slices);
  // The span's own bin may hold shorter spans: of the first few that fit,
  // the one in the densest range.
  Page* best = nullptr;
  size_t best_score = 0;
  size_t candidates = 0;
  for (Page* span = bins_[bin]; span != nullptr && candidates < kDensityCandidates; span = span->next) {
    if (span->slice_count < slices) continue;
    ++candidates;
    size_t score = front_density(span);
    if (score >= huge_ranges::kDenseSlices) return span;  // none can be much denser
    if (best == nullptr || score > best_score) best = span, best_score = score;
  }
  if (best != nullptr) return best;
  uint32_t higher = nonempty_bins_ & ~((2u << bin) - 1);
  // From the larger bins, a span whose front is still resident first:
  // taking that faults nothing in, and free memory held for reuse
  // (PurgePolicy::dirty_allowance_bytes) is reused before fresh memory is
  // touched; then the densest range; then the shortest span. (Only each
  // bin's head is looked at: the most recently freed of its spans.)
  for (uint32_t rest = higher; rest != 0; rest &= rest - 1) {
    Page* head = bins_[std::countr_zero(rest)];
    Segment* segment = segment_of_page(head);
    bool resident = segment_dirty_count(segment, segment->slice_index(head), slices) == slices;
    size_t score = (resident ? kRangeSlices + 1 : 0) + front_density(head);
    if (best == nullptr || score > best_score) best = head, best_score = score;
  }
  return best;
}

Segment* SpanAllocator::add_segment_locked(Segment* segment) {
  segment->prev = nullptr;
  segment->next = segments_;
  if (segments_ != nullptr) segments_->prev = segment;
  segments_ = segment;
  // Each slice of the new segment maps to its own descriptor, which the
  // fresh mapping holds as zero, i.e. free: the slice map's invariant holds
  // with only the ends pointing at the head, and taking slabs one by one
  // off the front rewrites no entry of the rest (with every entry pointing
  // at the head, each split would rewrite all of them).
  for (size_t i = kHeaderSlices + 1; i < kSlicesPerSegment - 1; ++i) segment->page_of_slice[i] = &segment->pages[i];
  insert_free(segment, kHeaderSlices, kPayloadSlices, 0, Map::kEnds);
  return segment;
}

Page* SpanAllocator::allocate_locked(size_t slices, PageKind kind, bool* is_zero, bool big_taker,
                                     huge_ranges::Collapses& collapses) {
  Page* free_span = take_fitting(slices);
  if (free_span == nullptr) return nullptr;
  Segment* segment = segment_of_page(free_span);
  size_t first = segment->slice_index(free_span);
  size_t total = free_span->slice_count;
  if (!segment_commit(segment, first, slices, first + total)) return nullptr;
  remove_free(free_span);
  policy_.note_take(slices);
  // Only slabs promote ranges: a large block's pages are touched as the
  // program pleases (often in part), and large blocks come and go in
  // bursts (realloc growth: collapses there cost 20% more page faults).
  size_t in_use = stats::in_use_bytes();
  bool judge = kind == PageKind::kSlab && huge_ranges::opens_huge(in_use, big_taker);
  bool collapse = judge && huge_ranges::active(in_use);
  uint32_t fresh = judge ? fresh_ranges_locked(segment, first, slices) : 0;
  // Taken from the front, so that a large block can later grow in place.
  Page* rest = nullptr;
  if (total > slices) {
    insert_free(segment, first + slices, total - slices, free_span->freed_at, Map::kRest);
    rest = &segment->pages[first + slices];
  }

  *is_zero = segment_range_is_clean(segment, first, slices);
  size_t clean = segment_mark_dirty(segment, first, slices);
  note_reuse_locked(segment, first, slices, clean);
  dirty_free_slices_ -= slices - clean;
  segment->used_slices += static_cast<uint32_t>(slices);
  note_ranges_taken_locked(segment, first, slices, judge, collapse, fresh, rest, collapses);

  Page* span = &segment->pages[first];
  init_used_span(segment, span, first, slices, kind);
  return span;
}

Page* SpanAllocator::allocate(size_t slices, PageKind kind, bool* is_zero, bool big_taker) {
  // Collapsing a range copies 2 MiB: never under the lock. While a
  // purger's clock runs, not before the range has stayed dense for a purge
  // delay either, and then in the purger's thread: a copy pays for itself
  // in TLB misses only over a heap's life, and a program that passes the
  // threshold near its end (sqlite3, 71 MiB) spent up to a sixth of its time
  // copying the 64 MiB it had on small pages.
  huge_ranges::Collapses collapses;
  Page* span = allocate_or_map(slices, kind, is_zero, big_taker, collapses);
  if (collapses.count == 0) return span;
  if (g_purge_clock.load(std::memory_order_relaxed)) defer_collapses(collapses);
  else collapses.run();
  return span;
}

Page* SpanAllocator::allocate_or_map(size_t slices, PageKind kind, bool* is_zero, bool big_taker,
                                     huge_ranges::Collapses& collapses) {
  {
    LockGuard guard(lock_);
    Page* span = allocate_locked(slices, kind, is_zero, big_taker, collapses);
    if (span != nullptr) return span;
  }
  // Map outside the lock: the system call can take a while.
  Segment* segment = segment_create();
  if (segment == nullptr && g_hooks.release_cached_memory != nullptr && g_hooks.release_cached_memory()) {
    LockGuard guard(lock_);
    Page* span = allocate_locked(slices, kind, is_zero, big_taker, collapses);  // released memory may fit
    if (span != nullptr) return span;
  }
  if (segment == nullptr) segment = segment_create();
  if (segment == nullptr) return nullptr;
  LockGuard guard(lock_);
  add_segment_locked(segment);
  return allocate_locked(slices, kind, is_zero, big_taker, collapses);
}

void SpanAllocator::release_locked(Page* span, uint64_t now, uint64_t idle_ms) {
  Segment* segment = segment_of_page(span);
  size_t first = segment->slice_index(span);
  size_t count = span->slice_count;
  segment->used_slices -= static_cast<uint32_t>(count);
  huge_ranges::note_released(segment, first, count);
  dirty_free_slices_ += count;  // a span in use is dirty throughout
  policy_.note_dirty_free(dirty_free_slices_);
  mark_absorbed(span);  // its slices still map to it
  insert_coalesced_locked(segment, first, count, now > idle_ms ? now - idle_ms : 0, count);
}

void SpanAllocator::insert_coalesced_locked(Segment* segment, size_t first, size_t count, uint64_t freed_at,
                                            size_t resident) {
  // Coalesce with the free spans on either side. The merged span's age is
  // that of most of its resident memory: were it always the new span's, a
  // trickle of small frees next to a large free span would keep that span
  // from ever being purged. (Neighbours being purged are not free yet:
  // they merge when they come back.)
  size_t old_dirty = 0;
  uint64_t old_freed_at = freed_at;
  // (A neighbour with nothing resident has no say: a clean stretch of a
  // segment never used, whose age is its creation's, would otherwise date
  // memory freed a moment ago next to it as long expired.)
  auto absorb_age = [&](const Page* neighbour, size_t neighbour_first) {
    size_t dirty = segment_dirty_count(segment, neighbour_first, neighbour->slice_count);
    old_dirty += dirty;
    if (dirty != 0 && neighbour->freed_at < old_freed_at) old_freed_at = neighbour->freed_at;
  };
  size_t end = first + count;
  if (end < kSlicesPerSegment) {
    Page* after = segment->page_of_slice[end];
    if (after != nullptr && after->kind() == PageKind::kFree && segment->slice_index(after) == end) {
      remove_free(after);
      absorb_age(after, end);
      // Our last slice becomes an inner one too: a purged span that comes
      // back is free already, its inner entries may point past its head.
      demote_last_slice(segment, first, end - 1);
      count += after->slice_count;
    }
  }
  if (first > 1) {
    Page* before = segment->page_of_slice[first - 1];
    if (before != nullptr && before->kind() == PageKind::kFree) {
      remove_free(before);
      size_t before_first = segment->slice_index(before);
      absorb_age(before, before_first);
      demote_last_slice(segment, before_first, first - 1);
      count += first - before_first;
      first = before_first;
    }
  }
  insert_free(segment, first, count, old_dirty > resident ? old_freed_at : freed_at, Map::kEnds);
}

void SpanAllocator::release(Page* span, uint64_t idle_ms) {
  PurgeBatch batch;
  bool more = release_and_choose_purges(span, idle_ms, batch);
  finish_purge(batch, g_options.retain_segments);
  // A burst larger than a batch goes back in several.
  while (more) {
    {
      LockGuard guard(lock_);
      more = choose_excess_purges_locked(dirty_allowance_bytes_locked(os::monotonic_ms()) >> kSliceShift, kAnyAge,
                                         batch);
    }
    finish_purge(batch, g_options.retain_segments);
  }
}

bool SpanAllocator::choose_excess_purges_locked(size_t allowance, uint64_t freed_by, PurgeBatch& batch) {
  for (size_t b = kBins; b-- > 0 && dirty_free_slices_ > allowance && !batch.full();) {
    for (Page* s = bins_[b]; s != nullptr && dirty_free_slices_ > allowance && !batch.full();) {
      Page* next_span = s->next;  // (before s leaves the bin)
      if (s->freed_at <= freed_by) detach_for_purge_locked(s, batch, true);
      s = next_span;
    }
  }
  return batch.full() && dirty_free_slices_ > allowance;
}

// The policy judges the release (a shrink? a burst?) by the memory in use
// without the span and the free memory resident with it.
bool SpanAllocator::release_and_choose_purges(Page* span, uint64_t idle_ms, PurgeBatch& batch) {
  uint64_t now = os::monotonic_ms();
  LockGuard guard(lock_);
  // (The span's bytes left the count of memory in use just before.)
  size_t in_use = stats::in_use_bytes();
  policy_.note_release(in_use + span->span_bytes());
  release_locked(span, now, idle_ms);
  XALLOC_DEBUG_ONLY(check_invariants());
  bool shrinking = policy_.release_shrinks(now, in_use);
  uint64_t next = __atomic_load_n(&next_purge_ms_, __ATOMIC_RELAXED);
  size_t allowance_bytes = dirty_allowance_bytes_locked(now);
  size_t allowance = allowance_bytes >> kSliceShift;
  // A burst is given back at once, largest spans first.
  bool more = policy_.is_burst(dirty_free_slices_, allowance_bytes, shrinking) &&
              choose_excess_purges_locked(allowance, kAnyAge, batch);
  if (now >= next) {
    purge_locked(false, now, batch);
  } else if (dirty_free_slices_ > allowance) {
    // Over budget: look again as soon as this excess may be purged.
    uint64_t soon = now + g_options.purge_delay_ms / 10;
    if (soon < next) __atomic_store_n(&next_purge_ms_, soon, __ATOMIC_RELAXED);
  }
  return more;
}

bool SpanAllocator::try_grow(Page* span, size_t slices) {
  Segment* segment = segment_of_page(span);
  size_t first = segment->slice_index(span);
  if (first + slices > kSlicesPerSegment) return false;
  LockGuard guard(lock_);
  size_t end = first + span->slice_count;
  Page* after = end < kSlicesPerSegment ? segment->page_of_slice[end] : nullptr;
  if (after == nullptr || after->kind() != PageKind::kFree || segment->slice_index(after) != end) return false;
  size_t extra = slices - span->slice_count;
  if (after->slice_count < extra) return false;
  if (!segment_commit(segment, end, extra, end + after->slice_count)) return false;
  remove_free(after);
  policy_.note_take(extra);
  size_t rest = after->slice_count - extra;
  uint64_t freed_at = after->freed_at;
  if (rest > 0) insert_free(segment, end + extra, rest, freed_at, Map::kRest);  // its entries may point to `after`
  size_t clean = segment_mark_dirty(segment, end, extra);
  note_reuse_locked(segment, end, extra, clean);
  dirty_free_slices_ -= extra - clean;
  segment->used_slices += static_cast<uint32_t>(extra);
  huge_ranges::note_taken(segment, end, extra);  // (a large block: promotes nothing, allocate_locked)
  span->slice_count = static_cast<uint16_t>(slices) & 0xfff;
  map_slices(segment, end, extra, span);
  return true;
}

void SpanAllocator::shrink(Page* span, size_t slices) {
  if (slices >= span->slice_count) return;
  Segment* segment = segment_of_page(span);
  size_t first = segment->slice_index(span);
  LockGuard guard(lock_);
  size_t tail_first = first + slices;
  size_t tail_count = span->slice_count - slices;
  span->slice_count = static_cast<uint16_t>(slices) & 0xfff;
  Page* tail = &segment->pages[tail_first];
  tail->slice_count = static_cast<uint16_t>(tail_count) & 0xfff;
  tail->set_kind(PageKind::kLarge);
  map_slices(segment, tail_first, tail_count, tail);
  release_locked(tail, os::monotonic_ms());
}

Page* SpanAllocator::trim_front(Page* span, size_t slices) {
  Segment* segment = segment_of_page(span);
  size_t first = segment->slice_index(span);
  LockGuard guard(lock_);
  Page* rest = &segment->pages[first + slices];
  rest->slice_count = static_cast<uint16_t>(span->slice_count - slices) & 0xfff;
  rest->start = segment->slice_address(first + slices);
  rest->set_kind(PageKind::kLarge);
  rest->next = rest->prev = nullptr;
  map_slices(segment, first + slices, rest->slice_count, rest);
  span->slice_count = static_cast<uint16_t>(slices) & 0xfff;
  span->set_kind(PageKind::kLarge);
  release_locked(span, os::monotonic_ms());
  return rest;
}

size_t SpanAllocator::detach_for_purge_locked(Page* span, PurgeBatch& batch, bool for_budget, bool keep_huge) {
  Segment* segment = segment_of_page(span);
  size_t first = segment->slice_index(span);
  size_t end = first + span->slice_count;
  if (keep_huge) huge_ranges::trim_kept(segment, &first, &end);
  if (first >= end) return 0;
  size_t purged = segment_mark_purged(segment, first, end - first, for_budget ? policy_.epoch() : 0);
  if (purged == 0) return 0;
  huge_ranges::demote(segment, first, end);
  dirty_free_slices_ -= purged >> kSliceShift;
  if (for_budget) policy_.note_budget_purge(purged >> kSliceShift);
  remove_free(span);
  span->set_kind(PageKind::kPurging);
  span->next = purging_;
  if (purging_ != nullptr) purging_->prev = span;
  purging_ = span;
  batch.first[batch.count] = static_cast<uint16_t>(first);
  batch.slices[batch.count] = static_cast<uint16_t>(end - first);
  batch.spans[batch.count++] = span;
  batch.bytes += purged;
  return purged;
}

void SpanAllocator::reinsert_purged_locked(Page* span) {
  if (span->prev != nullptr) span->prev->next = span->next;
  else purging_ = span->next;
  if (span->next != nullptr) span->next->prev = span->prev;
  span->next = span->prev = nullptr;
  Segment* segment = segment_of_page(span);
  mark_absorbed(span);
  insert_coalesced_locked(segment, segment->slice_index(span), span->slice_count, span->freed_at, 0);
}

size_t SpanAllocator::finish_purge(PurgeBatch& batch, size_t keep_segments) {
  if (batch.count == 0) return 0;
  // Nobody else touches the spans meanwhile: they are in no bin, and their
  // kind keeps their neighbours from merging with them.
  for (size_t i = 0; i < batch.count; ++i) {
    const Segment* segment = segment_of_page(batch.spans[i]);
    release_pages(segment->slice_address(batch.first[i]), size_t{batch.slices[i]} << kSliceShift);
  }
  LockGuard guard(lock_);
  for (size_t i = 0; i < batch.count; ++i) reinsert_purged_locked(batch.spans[i]);
  XALLOC_DEBUG_ONLY(check_invariants());
  size_t released = batch.bytes + unmap_empty_segments_locked(keep_segments);
  batch.count = 0;
  batch.bytes = 0;
  return released;
}

void SpanAllocator::reset_after_fork_child() {
  lock_.reset_after_fork();
  // The threads that were purging these do not exist here.
  while (purging_ != nullptr) {
    purge_pages(purging_);
    reinsert_purged_locked(purging_);
  }
}

// The segment knows which slices were purged for the budget, in which
// review period; the policy weighs them (PurgePolicy::note_reuse).
void SpanAllocator::note_reuse_locked(Segment* segment, size_t first, size_t count, size_t clean) {
  policy_.note_reuse(segment_take_budget_purged(segment, first, count, policy_.epoch()), clean);
}

uint32_t SpanAllocator::note_huge_budget_purge(size_t bytes) {
  LockGuard guard(lock_);
  return policy_.note_budget_purge(bytes >> kSliceShift);
}

void SpanAllocator::note_huge_budget_reuse(uint32_t epoch, size_t bytes) {
  LockGuard guard(lock_);
  policy_.note_reuse_of_epoch(epoch, bytes >> kSliceShift);
}

size_t SpanAllocator::dirty_allowance_bytes_locked(uint64_t now_ms) {
  return policy_.dirty_allowance_bytes(now_ms, dirty_free_slices_, [this] { return live_bytes_locked(); });
}

// Bytes of live blocks: in slabs counted from their descriptors (racing
// with their owners: an estimate), large and huge blocks whole.
size_t SpanAllocator::live_bytes_locked() const {
  size_t live = stats::g_global.large_in_use.load(std::memory_order_relaxed);
  [[maybe_unused]] OwnerFieldReads estimate;
  for_each_used_span_locked([&](const Page* span) {
    if (span->kind() == PageKind::kSlab) live += slab_blocks_in_use(span) * span->block_size();
  });
  return live;
}

size_t SpanAllocator::purge_locked(bool force, uint64_t now_ms, PurgeBatch& batch) {
  uint64_t delay = g_options.purge_delay_ms;
  uint64_t excess_delay = delay / 10;
  for (size_t b = 0; b < kBins && dirty_free_slices_ != 0 && !batch.full(); ++b) {
    for (Page* span = bins_[b]; span != nullptr && !batch.full();) {
      Page* next_span = span->next;  // (before span leaves the bin)
      if (force || now_ms >= span->freed_at + delay) detach_for_purge_locked(span, batch, false, !force);
      span = next_span;
    }
  }
  // Beyond the allowance, free memory has a tenth of the delay to be
  // reused; the largest spans go first (most memory per system call, and
  // the least likely to be wanted again at exactly that size).
  size_t allowance = dirty_allowance_bytes_locked(now_ms) >> kSliceShift;
  choose_excess_purges_locked(allowance, now_ms > excess_delay ? now_ms - excess_delay : 0, batch);
  if (!force) policy_.review(now_ms, dirty_free_slices_);
  // A full batch leaves work behind: look again soon.
  uint64_t next = dirty_free_slices_ > allowance || batch.full() ? excess_delay : delay / 4;
  __atomic_store_n(&next_purge_ms_, now_ms + (next > 5 ? next : 5), __ATOMIC_RELAXED);
  return unmap_empty_segments_locked(force ? 0 : g_options.retain_segments);
}

size_t SpanAllocator::unmap_empty_segments_locked(size_t keep) {
  size_t released = 0;
  for (Segment* segment = segments_; segment != nullptr && free_segments_ > keep;) {
    Segment* next = segment->next;
    Page* span = segment->page_of_slice[kHeaderSlices];
    if (span->kind() == PageKind::kFree && span->slice_count == kPayloadSlices &&
        segment_range_is_clean(segment, kHeaderSlices, kPayloadSlices)) {
      remove_free(span);
      if (segment->prev != nullptr) segment->prev->next = segment->next;
      else segments_ = segment->next;
      if (segment->next != nullptr) segment->next->prev = segment->prev;
      drop_deferred_collapses_locked(segment);
      segment_destroy(segment);
      released += kSegmentSize;
    }
    segment = next;
  }
  return released;
}

size_t SpanAllocator::purge(bool force) {
  size_t keep = force ? 0 : g_options.retain_segments;
  size_t released = 0;
  bool more = true;
  while (more) {
    PurgeBatch batch;
    {
      LockGuard guard(lock_);
      released += purge_locked(force, os::monotonic_ms(), batch);
    }
    more = batch.full();
    released += finish_purge(batch, keep);
  }
  return released;
}

void SpanAllocator::maybe_purge(uint64_t now_ms) {
  if (now_ms < __atomic_load_n(&next_purge_ms_, __ATOMIC_RELAXED)) return;
  if (!lock_.try_lock()) return;  // someone else is in here and will do it
  PurgeBatch batch;
  purge_locked(false, now_ms, batch);
  lock_.unlock();
  finish_purge(batch, g_options.retain_segments);
}

}  // namespace xalloc
