#include "backend/segment.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "support/options.h"
#include "platform/os.h"
#include "platform/shared_count.h"
#include "support/counters.h"

namespace xalloc {

namespace {

// Set bits of `word`. x86-64's baseline has no popcnt instruction, and
// std::popcount without it is a call into libgcc that costs about twenty
// instructions; the span allocator counts a segment's dirty slices a few
// words at a time on every large allocation and free.
inline size_t count_bits(uint64_t word) {
  word -= (word >> 1) & 0x5555555555555555;
  word = (word & 0x3333333333333333) + ((word >> 2) & 0x3333333333333333);
  word = (word + (word >> 4)) & 0x0f0f0f0f0f0f0f0f;
  return static_cast<size_t>((word * 0x0101010101010101) >> 56);
}

}  // namespace

// 4 MiB of .bss: only the pages covering used granules ever become resident.
uint8_t g_segment_map[kSegmentMapEntries];

namespace {

// The whole pages of the map that segment_map_init replaced, and which of
// them are writable again (set once made so).
XALLOC_STARTUP_DATA os::PageRange g_map_zeros;
constexpr size_t kMapPages = kSegmentMapEntries / kOsPageSize + 1;
std::atomic<uint64_t> g_map_pages_writable[(kMapPages + 63) / 64];

}  // namespace

void segment_map_init() {
  if (g_options.commit_on_demand) g_map_zeros = os::remap_read_only_zeros(g_segment_map, kSegmentMapEntries);
}

bool segment_map_prepare(uintptr_t base, size_t size) {
  if (g_map_zeros.end == 0) return true;
  uintptr_t first = base >> kSegmentShift;
  uintptr_t last = (base + size - 1) >> kSegmentShift;
  if (first >= kSegmentMapEntries) return true;
  if (last >= kSegmentMapEntries) last = kSegmentMapEntries - 1;
  auto from = reinterpret_cast<uintptr_t>(&g_segment_map[first]) & ~(kOsPageSize - 1);
  auto to = reinterpret_cast<uintptr_t>(&g_segment_map[last]);
  for (uintptr_t page = from; page <= to; page += kOsPageSize) {
    if (page < g_map_zeros.begin || page >= g_map_zeros.end) continue;
    size_t n = (page - g_map_zeros.begin) / kOsPageSize;
    uint64_t bit = uint64_t{1} << (n % 64);
    // Acquire: a page another thread marked is writable for this one too.
    if (g_map_pages_writable[n / 64].load(std::memory_order_acquire) & bit) continue;
    if (!os::commit(reinterpret_cast<void*>(page), kOsPageSize)) return false;
    shared_count::atomic_rmw(shared_count::Site::kSegmentMapBits, &g_map_pages_writable[n / 64]);
    g_map_pages_writable[n / 64].fetch_or(bit, std::memory_order_release);
  }
  return true;
}

void segment_map_set(uintptr_t base, size_t size, bool present) {
  uintptr_t first = base >> kSegmentShift;
  uintptr_t last = (base + size - 1) >> kSegmentShift;
  for (uintptr_t i = first; i <= last && i < kSegmentMapEntries; ++i) {
    uint8_t value = present ? (i == first ? kMapSegmentHead : kMapHugeTail) : kMapUnused;
    __atomic_store_n(&g_segment_map[i], value, __ATOMIC_RELEASE);
  }
}

namespace {

constexpr size_t kHeaderPopulateBytes =
    round_up(offsetof(Segment, pages) + (kHeaderSlices + 28) * sizeof(Page), kOsPageSize);

}  // namespace

Segment* segment_create() {
  void* memory = g_options.commit_on_demand ? os::reserve_aligned(kSegmentSize, kSegmentSize)
                                            : os::map_aligned(kSegmentSize, kSegmentSize);
  if (memory == nullptr) return nullptr;
  if (!segment_map_prepare(reinterpret_cast<uintptr_t>(memory), kSegmentSize) ||
      (g_options.commit_on_demand && !os::commit(memory, kHeaderBytes))) {
    os::unmap(memory, kSegmentSize);
    return nullptr;
  }
  // With THP "always" the kernel would back every 2 MiB the program
  // touches with a huge page, and khugepaged would fill purged holes in
  // again (options.h); with "auto" the dense ranges are advised one by one
  // (huge_ranges.h).
  os::advise_huge_pages(memory, kSegmentSize, g_options.huge_pages == Switch::kOn);
  auto* segment = segment_at(reinterpret_cast<uintptr_t>(memory));
  segment_protect_header(reinterpret_cast<uintptr_t>(memory));
  // Its fields, slice map and the descriptors of its first 28 spans, which
  // a small program writes all of, resident in one call (os.h).
  os::populate(segment, kHeaderPopulateBytes);
  // The mapping is fresh, so every field not set here is already zero.
  segment->kind = SegmentKind::kNormal;
  segment->mapping_size = kSegmentSize;
  segment->used_slices = kHeaderSlices;
  segment->range_used[0] = kHeaderSlices;
  segment->dirty[0] = (uint64_t{1} << kHeaderSlices) - 1;  // the header's slices
  segment->committed[0] = segment->dirty[0];
  stats::add(stats::g_global.committed, kHeaderBytes);

  Page* header = &segment->pages[0];
  header->set_kind(PageKind::kHeader);
  header->slice_count = kHeaderSlices;
  header->start = segment->base();
  for (size_t i = 0; i < kHeaderSlices; ++i) segment->page_of_slice[i] = header;

  segment_map_set(segment->base(), kSegmentSize, true);
  stats::add(stats::g_global.mapped, kSegmentSize);
  stats::add(stats::g_global.segments, 1);
  return segment;
}

void segment_destroy(Segment* segment) {
  size_t size = segment->mapping_size;
  if (segment->kind == SegmentKind::kNormal) {
    size_t dirty = 0;
    for (uint64_t word : segment->dirty) dirty += count_bits(word);
    stats::sub(stats::g_global.committed, dirty << kSliceShift);
  }
  segment_map_set(segment->base(), size, false);
  stats::sub(stats::g_global.mapped, size);
  stats::sub(stats::g_global.segments, 1);
  os::unmap(reinterpret_cast<void*>(segment->base()), size);
}

void segment_protect_header(uintptr_t base) {
  if (!secure::kEnabled) return;
  // Never taken down: they go with the mapping.
  os::guard_install(reinterpret_cast<void*>(base), secure::kGuardBytes);
  os::guard_install(reinterpret_cast<void*>(base + kHeaderBytes - secure::kGuardBytes), secure::kGuardBytes);
}

void release_pages(uintptr_t start, size_t bytes) {
  auto* pages = reinterpret_cast<void*>(start);
  if (!g_options.commit_on_demand) return os::purge(pages, bytes);
  os::decommit(pages, bytes);
  os::advise_huge_pages(pages, bytes, g_options.huge_pages == Switch::kOn);  // the new mapping has the kernel's default
}

namespace {

inline bool dirty_bit(const Segment* s, size_t i) { return (s->dirty[i / 64] >> (i % 64)) & 1; }

// Calls fn(word, mask) for each word of a slice bitmap that holds bits of
// the slices [first, first + count), `mask` selecting those bits.
template <typename Fn>
inline void for_each_range_word(size_t first, size_t count, Fn&& fn) {
  if (count == 0) return;
  size_t last = (first + count - 1) / 64;
  uint64_t mask = ~uint64_t{0} << (first % 64);
  for (size_t word = first / 64; word < last; ++word, mask = ~uint64_t{0}) fn(word, mask);
  fn(last, mask & (~uint64_t{0} >> (63 - (first + count - 1) % 64)));
}

// Budget-purge marks (Segment::budget_purged) of a period before the last
// one are too old to count.
void forget_stale_budget_purges(Segment* segment, uint32_t epoch) {
  if (segment->budget_purge_epoch + 1 < epoch) {
    for (uint64_t& word : segment->budget_purged) word = 0;
    segment->budget_purge_epoch = epoch;
  }
}

void note_budget_purge(Segment* segment, size_t first, size_t count, uint32_t epoch) {
  forget_stale_budget_purges(segment, epoch);
  segment->budget_purge_epoch = epoch;
  for_each_range_word(first, count, [&](size_t word, uint64_t mask) { segment->budget_purged[word] |= mask; });
}

}  // namespace

bool segment_range_is_clean(const Segment* segment, size_t first, size_t count) {
  uint64_t dirty = 0;
  for_each_range_word(first, count, [&](size_t word, uint64_t mask) { dirty |= segment->dirty[word] & mask; });
  return dirty == 0;
}

size_t segment_dirty_count(const Segment* segment, size_t first, size_t count) {
  // Free spans run to hundreds of slices, mostly all dirty or all clean:
  // whole words of either are counted without the bit count.
  size_t dirty = 0;
  for_each_range_word(first, count, [&](size_t word, uint64_t mask) {
    uint64_t bits = segment->dirty[word] & mask;
    if (bits == ~uint64_t{0}) dirty += 64;
    else if (bits != 0) dirty += count_bits(bits);
  });
  return dirty;
}

bool segment_commit(Segment* segment, size_t first, size_t count, size_t free_end) {
  if (!g_options.commit_on_demand) return true;
  uint64_t missing = 0;
  for_each_range_word(first, count, [&](size_t word, uint64_t mask) { missing |= ~segment->committed[word] & mask; });
  if (missing == 0) return true;
  // Ahead: as many slices as the segment has in use, from 4 (256 KiB) to
  // 16 (1 MiB), so that a small process is not charged a MiB it never
  // touches while a growing one needs few calls.
  size_t ahead = std::clamp<size_t>(segment->used_slices, 4, 16);
  size_t end = std::max(first + count, std::min(first + ahead, free_end));
  if (!os::commit(reinterpret_cast<void*>(segment->base() + (first << kSliceShift)), (end - first) << kSliceShift))
    return false;
  for_each_range_word(first, end - first, [&](size_t word, uint64_t mask) { segment->committed[word] |= mask; });
  return true;
}

size_t segment_mark_dirty(Segment* segment, size_t first, size_t count) {
  size_t newly = 0;
  for_each_range_word(first, count, [&](size_t word, uint64_t mask) {
    newly += count_bits(~segment->dirty[word] & mask);
    segment->dirty[word] |= mask;
  });
  if (newly != 0) stats::add(stats::g_global.committed, newly << kSliceShift);
  return newly;
}

size_t segment_mark_purged(Segment* segment, size_t first, size_t count, uint32_t budget_epoch) {
  size_t purged = 0;
  size_t i = first;
  size_t end = first + count;
  while (i < end) {
    if (!dirty_bit(segment, i)) {
      ++i;
      continue;
    }
    size_t run = i;
    while (run < end && dirty_bit(segment, run)) {
      segment->dirty[run / 64] &= ~(uint64_t{1} << (run % 64));
      ++run;
    }
    if (budget_epoch != 0) note_budget_purge(segment, i, run - i, budget_epoch);
    purged += (run - i) << kSliceShift;
    i = run;
  }
  if (purged != 0 && g_options.commit_on_demand)
    for_each_range_word(first, count, [&](size_t word, uint64_t mask) { segment->committed[word] &= ~mask; });
  stats::sub(stats::g_global.committed, purged);
  stats::add(stats::g_global.purged, purged);
  return purged;
}

size_t segment_take_budget_purged(Segment* segment, size_t first, size_t count, uint32_t epoch) {
  forget_stale_budget_purges(segment, epoch);
  size_t taken = 0;
  for_each_range_word(first, count, [&](size_t word, uint64_t mask) {
    taken += count_bits(segment->budget_purged[word] & mask);
    segment->budget_purged[word] &= ~mask;
  });
  return taken;
}

}  // namespace xalloc
