// The cache of freed huge mappings.
//
// A freed huge block's mapping is kept, most recently freed first, for a
// later huge block that fits it, up to g_options.huge_cache_bytes in all.
// Its pages are purged (given back, the address space kept) once they have
// gone unused for a purge delay, or sooner when the cache holds more
// resident bytes than the dirty budget (span_allocator.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/segment.h"

namespace xalloc {

// A huge block starts this far into its mapping (the header is in front of
// it), or at the first multiple of its alignment past that.
constexpr size_t kHugeHeader = kHeaderBytes;

// A cached mapping that fits `mapping` bytes without wasting more than a
// quarter, taken out of the cache; null if there is none.
Segment* huge_cache_take(size_t mapping);

// Makes the bytes of a mapping taken from the cache accessible again from
// `offset` on (secure mode, or commit on demand, sealed them). `opened`:
// whether any protection changed. False if the kernel refused.
bool huge_cache_open(Segment* segment, size_t offset, bool* opened);

// The mapping of a freed huge block (its usable bytes no longer counted in
// use): cached, or unmapped if it is larger than the whole cache. Mappings
// the cache has no room for go, least recently freed first.
void huge_cache_put(Segment* segment);

// Unmaps a huge block's mapping, taken out of the cache or never put in it.
void huge_unmap(Segment* segment);

// Purges cached huge mappings past their delay (or over the budget); with
// `force`, unmaps them all. Returns the bytes given back.
size_t huge_cache_purge(bool force, uint64_t now_ms);
// huge_cache_purge(false) when the next purge is due.
void huge_cache_maybe_purge(uint64_t now_ms);

// Bytes of cached mappings not purged (statistics).
size_t huge_cache_resident_bytes();
void huge_cache_lock_for_fork();
void huge_cache_unlock_after_fork_parent();
void huge_cache_reset_after_fork_child();

}  // namespace xalloc
