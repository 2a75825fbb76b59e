#include "frontend/huge_cache.h"

#include "support/counters.h"
#include "support/options.h"
#include "platform/lock.h"
#include "platform/os.h"
#include "backend/span_allocator.h"

namespace xalloc {

namespace {

// Everything below is written under g_huge_lock. g_huge_cache and
// g_huge_next_purge_ms are also read without it (huge_cache_maybe_purge,
// at every thread's periodic work), hence their atomic accesses.
XALLOC_FORK_DATA Mutex g_huge_lock{shared_count::Site::kHugeCacheLock};
XALLOC_STARTUP_DATA Segment* g_huge_cache = nullptr;  // most recently freed first
XALLOC_STARTUP_DATA size_t g_huge_cache_bytes = 0;
XALLOC_STARTUP_DATA size_t g_huge_cache_resident = 0;  // of which not purged
XALLOC_STARTUP_DATA uint64_t g_huge_next_purge_ms = 0;
// Bytes freed into the cache since a cached mapping was last reused: a
// burst of frees that nothing takes back (cache_purge_after_free).
XALLOC_STARTUP_DATA size_t g_huge_unreused_bytes = 0;

// Secure mode: once a cached huge block's pages are given back, they are
// made inaccessible too, so a use after free faults as it would on an
// unmapped block; the header slices, which the cache's links live in, stay
// readable. (Sealed only then: changing the protection of resident pages
// costs a page-table walk and a TLB flush at every free and every reuse -
// 140 us a block in malloc-large, 2.6 times its time - while purged pages
// have no entries to change.) A block taken from a sealed mapping gets back
// exactly the bytes it may use: the guard page after it, and whatever its
// offset leaves in front, stay inaccessible. With commit on demand
// (options.h) every build seals them, by decommitting, which also takes
// them off the commit charge.
void cache_purge_and_seal(Segment* segment) {
  auto* start = reinterpret_cast<void*>(segment->base() + kHugeHeader);
  size_t bytes = segment->mapping_size - kHugeHeader;
  if (g_options.commit_on_demand) {
    os::decommit(start, bytes);
    segment->huge_sealed = 1;
    return;
  }
  os::purge(start, bytes);
  // Refused (too many mappings): the block stays accessible, its pages
  // purged.
  if (secure::kEnabled) segment->huge_sealed = os::protect_none(start, bytes);
}

void cache_unlink(Segment* segment) {
  if (segment->prev != nullptr) segment->prev->next = segment->next;
  else __atomic_store_n(&g_huge_cache, segment->next, __ATOMIC_RELAXED);
  if (segment->next != nullptr) segment->next->prev = segment->prev;
  segment->next = segment->prev = nullptr;
  g_huge_cache_bytes -= segment->mapping_size;
  if (!segment->huge_purged) g_huge_cache_resident -= segment->mapping_size;
}

// `for_budget`: purged to keep within the dirty budget, not because its
// delay passed. Such a mapping taken again soon after is evidence for the
// budget's feedback (backend/purge_policy.cpp): a program that frees a 24 MiB
// buffer and takes it again in a loop faulted every page of it in again at
// every turn, 25 times the time it takes with the memory kept.
void cache_purge_locked(Segment* s, bool for_budget) {
  cache_purge_and_seal(s);
  s->huge_purged = 1;
  s->budget_purge_epoch = for_budget ? g_spans.note_huge_budget_purge(s->mapping_size) : 0;
  g_huge_cache_resident -= s->mapping_size;
  stats::sub(stats::g_global.committed, s->mapping_size);
  stats::add(stats::g_global.purged, s->mapping_size - kHugeHeader);
}

// Puts a freed huge block's mapping first in the cache (under g_huge_lock).
void cache_push(Segment* segment) {
  segment->freed_at = os::monotonic_ms();
  segment->pages[0].set_kind(PageKind::kFree);  // a second free is reported
  segment->prev = nullptr;
  segment->next = g_huge_cache;
  if (g_huge_cache != nullptr) g_huge_cache->prev = segment;
  __atomic_store_n(&g_huge_cache, segment, __ATOMIC_RELAXED);
  g_huge_cache_bytes += segment->mapping_size;
  g_huge_cache_resident += segment->mapping_size;
  g_huge_unreused_bytes += segment->mapping_size;
}

// The least recently freed mapping in the cache; null if it is empty.
Segment* cache_oldest() {
  Segment* oldest = g_huge_cache;
  while (oldest != nullptr && oldest->next != nullptr) oldest = oldest->next;
  return oldest;
}

// Over budget: the least recently freed mappings go, from `oldest` on,
// which moves to the oldest one left. Returns them unlinked, chained by
// `next`, to be unmapped outside the lock.
Segment* cache_evict_over_budget(Segment*& oldest) {
  Segment* evict = nullptr;
  while (g_huge_cache_bytes > g_options.huge_cache_bytes) {
    Segment* prev = oldest->prev;
    cache_unlink(oldest);
    oldest->next = evict;
    evict = oldest;
    oldest = prev;
  }
  return evict;
}

// Purges, or schedules a purge, after a mapping freed at `freed_now`
// joined the cache, whose oldest is `oldest` (under g_huge_lock). A burst
// of frees far beyond the resident budget that nothing reuses, making up
// most of the cache (a buffer that doubled past 16 MiB on several threads
// at once), goes back at once, oldest first, as in the span allocator; a
// smaller excess once it may go.
// A cache in active use (blocks of varying sizes allocated and freed in
// turn) keeps the delay: a purged mapping faults its pages in again when it
// is reused.
void cache_purge_after_free(Segment* oldest, uint64_t freed_now) {
  size_t budget = dirty_budget_bytes();
  size_t hard_cap = burst_threshold_bytes(budget);
  if (g_huge_unreused_bytes > hard_cap && g_huge_unreused_bytes * 2 > g_huge_cache_bytes &&
      g_huge_cache_resident > hard_cap) {
    for (Segment* s = oldest; s != nullptr && g_huge_cache_resident > budget; s = s->prev)
      if (!s->huge_purged) cache_purge_locked(s, true);
  }
  if (g_huge_cache_resident > budget) {
    uint64_t soon = freed_now + g_options.purge_delay_ms / 10;
    if (soon < g_huge_next_purge_ms) __atomic_store_n(&g_huge_next_purge_ms, soon, __ATOMIC_RELAXED);
  }
}

// Unmaps every mapping of a list chained by `next`.
void unmap_all(Segment* list) {
  while (list != nullptr) {
    Segment* next = list->next;
    huge_unmap(list);
    list = next;
  }
}

}  // namespace

// The smallest that fits: the least address space left idle.
Segment* huge_cache_take(size_t mapping) {
  LockGuard guard(g_huge_lock);
  Segment* best = nullptr;
  for (Segment* s = g_huge_cache; s != nullptr; s = s->next) {
    if (s->mapping_size >= mapping && s->mapping_size - mapping <= mapping / 4 &&
        (best == nullptr || s->mapping_size < best->mapping_size))
      best = s;
  }
  if (best != nullptr) {
    cache_unlink(best);
    g_huge_unreused_bytes = 0;
    // (Only a mapping purged for the budget has a period: cache_purge_locked.)
    if (best->budget_purge_epoch != 0) {
      g_spans.note_huge_budget_reuse(best->budget_purge_epoch, best->mapping_size);
      best->budget_purge_epoch = 0;
    }
  }
  return best;
}

// Makes a cached mapping's bytes from `offset` on accessible again. Those
// in front of an aligned block stay sealed, even after the block is cached
// again unpurged: a later block at a smaller offset opens them. `opened`:
// whether any protection changed (the guard page's too, if it is made of
// protection rather than a mark).
bool huge_cache_open(Segment* segment, size_t offset, bool* opened) {
  *opened = false;
  if (!secure::kEnabled && !g_options.commit_on_demand) return true;
  uintptr_t base = segment->base();
  size_t open_from = segment->huge_sealed ? segment->mapping_size : segment->huge_open_from;
  if (offset >= open_from) return true;
  *opened = true;
  segment->huge_sealed = 0;
  segment->huge_open_from = static_cast<uint32_t>(offset);
  return os::protect_read_write(reinterpret_cast<void*>(base + offset), open_from - offset);
}

void huge_cache_put(Segment* segment) {
  Segment* evict = nullptr;
  bool cacheable = segment->mapping_size <= g_options.huge_cache_bytes;
  {
    LockGuard guard(g_huge_lock);
    if (cacheable) {
      cache_push(segment);
      uint64_t freed_now = segment->freed_at;
      segment = nullptr;
      Segment* oldest = cache_oldest();
      evict = cache_evict_over_budget(oldest);
      cache_purge_after_free(oldest, freed_now);
    }
  }
  if (segment != nullptr) huge_unmap(segment);
  unmap_all(evict);
}

void huge_unmap(Segment* segment) {
  if (!segment->huge_purged) stats::sub(stats::g_global.committed, segment->mapping_size);
  segment_destroy(segment);
}

size_t huge_cache_purge(bool force, uint64_t now_ms) {
  uint64_t delay = g_options.purge_delay_ms;
  size_t purged = 0;
  Segment* unmap_list = nullptr;
  {
    LockGuard guard(g_huge_lock);
    size_t budget = dirty_budget_bytes();
    // Oldest first: past the delay they go; beyond the budget, a tenth of
    // the delay is enough (as in the span allocator).
    for (Segment* s = cache_oldest(); s != nullptr;) {
      Segment* prev = s->prev;
      if (force) {
        // Everything goes back, address space included (counted as
        // released even when its pages were purged before).
        purged += s->mapping_size;
        cache_unlink(s);
        s->next = unmap_list;
        unmap_list = s;
      } else if (!s->huge_purged && now_ms >= s->freed_at + delay) {
        cache_purge_locked(s, false);
        purged += s->mapping_size - kHugeHeader;
      } else if (!s->huge_purged && g_huge_cache_resident > budget && now_ms >= s->freed_at + delay / 10) {
        cache_purge_locked(s, true);
        purged += s->mapping_size - kHugeHeader;
      }
      s = prev;
    }
    uint64_t next = g_huge_cache_resident > budget ? delay / 10 : delay / 4;
    __atomic_store_n(&g_huge_next_purge_ms, now_ms + (next > 5 ? next : 5), __ATOMIC_RELAXED);
  }
  unmap_all(unmap_list);
  return purged;
}

void huge_cache_maybe_purge(uint64_t now_ms) {
  if (__atomic_load_n(&g_huge_cache, __ATOMIC_RELAXED) == nullptr ||
      now_ms < __atomic_load_n(&g_huge_next_purge_ms, __ATOMIC_RELAXED))
    return;
  huge_cache_purge(false, now_ms);
}

size_t huge_cache_resident_bytes() {
  LockGuard guard(g_huge_lock);
  return g_huge_cache_resident;
}

void huge_cache_lock_for_fork() { g_huge_lock.lock(); }
void huge_cache_unlock_after_fork_parent() { g_huge_lock.unlock(); }
void huge_cache_reset_after_fork_child() { g_huge_lock.reset_after_fork(); }

}  // namespace xalloc
