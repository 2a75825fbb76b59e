#include "backend/huge_ranges.h"

#include <atomic>

#include "platform/os.h"
#include "support/counters.h"
#include "support/options.h"

namespace xalloc::huge_ranges {

namespace {

// Whether the kernel may give this process huge pages: 0 not asked yet,
// 1 yes, 2 no. Asked only once the heap is big, so small programs never
// read sysfs.
std::atomic<uint8_t> g_kernel_allows{0};

bool kernel_allows() {
  uint8_t known = g_kernel_allows.load(std::memory_order_relaxed);
  if (known == 0) {
    known = os::transparent_huge_pages_usable() ? 1 : 2;
    g_kernel_allows.store(known, std::memory_order_relaxed);
  }
  return known == 1;
}

// XALLOC_HUGE_PAGES=auto without commit on demand, the kernel willing: the
// thresholds apart, whether ranges are judged, and whether huge blocks get
// huge pages when dense (note_block), as a huge block is a big heap's by
// itself.
bool enabled() { return g_options.huge_pages == Switch::kAuto && !g_options.commit_on_demand && kernel_allows(); }

// The verdict on the last huge block noted: written densely.
std::atomic<bool> g_dense_blocks{false};

constexpr size_t kRangePages = kHugePageSize / kOsPageSize;
static_assert(kRangePages <= os::kResidencyPages);

// Counts the resident pages of the 2 MiB range at `range_start` (mincore)
// into *resident; false if the kernel refuses (not mapped).
bool count_resident(uintptr_t range_start, size_t* resident) {
  uint8_t residency[kRangePages];
  if (!os::page_residency(reinterpret_cast<void*>(range_start), kHugePageSize, residency)) return false;
  *resident = 0;
  for (uint8_t page : residency) *resident += page & 1;
  return true;
}

// Resident pages of the 2 MiB range at `range_start`; 0 if the kernel
// refuses.
size_t resident_pages(uintptr_t range_start) {
  size_t resident = 0;
  return count_resident(range_start, &resident) ? resident : 0;
}

// Calls fn(range, overlap) for each range [first, first+count) overlaps.
template <typename Fn>
void for_each_range(size_t first, size_t count, Fn&& fn) {
  size_t end = first + count;
  while (first < end) {
    size_t range_end = (range_of(first) + 1) * kRangeSlices;
    size_t stop = range_end < end ? range_end : end;
    fn(range_of(first), stop - first);
    first = stop;
  }
}

}  // namespace

// (With commit on demand a range's slices are committed piecemeal: mprotect
// splits the mapping, and no huge page spans the pieces. The thresholds
// come first, so that a small program never asks the kernel.)
bool active(size_t in_use_bytes) { return in_use_bytes >= kHeapThreshold && enabled(); }

bool opens_huge(size_t in_use_bytes, bool big_taker) {
  return (in_use_bytes >= kHeapThreshold || big_taker) && enabled();
}

Promotion promotion_for_take(bool huge, size_t used_after, bool fresh) {
  if (huge) return Promotion::kNone;
  if (used_after >= kDenseSlices) return Promotion::kCollapse;
  return fresh ? Promotion::kBeforeTouch : Promotion::kNone;
}

void note_taken(Segment* segment, size_t first, size_t count) {
  for_each_range(first, count, [&](size_t range, size_t n) { segment->range_used[range] += static_cast<uint8_t>(n); });
}

void note_released(Segment* segment, size_t first, size_t count) {
  for_each_range(first, count, [&](size_t range, size_t n) { segment->range_used[range] -= static_cast<uint8_t>(n); });
}

uint32_t ranges_of(size_t first, size_t count) {
  uint32_t mask = 0;
  for_each_range(first, count, [&](size_t range, size_t) { mask |= 1u << range; });
  return mask;
}

void promote(Segment* segment, size_t range) {
  segment->huge_ranges = static_cast<uint16_t>(segment->huge_ranges | (1u << range));
  os::advise_huge_pages(reinterpret_cast<void*>(segment->slice_address(range * kRangeSlices)), kHugePageSize, true);
}

void trim_kept(const Segment* segment, size_t* first, size_t* end) {
  if (segment->huge_ranges == 0 || *first >= *end) return;
  size_t front = range_of(*first);
  if (keeps_page(segment, front)) *first = (front + 1) * kRangeSlices;
  size_t back = range_of(*end - 1);
  if (*first < *end && keeps_page(segment, back)) *end = back * kRangeSlices;
}

void demote(Segment* segment, size_t first, size_t end) {
  if (segment->huge_ranges == 0 || first >= end) return;
  uint32_t overlapped = ranges_of(first, end - first) & segment->huge_ranges;
  if (overlapped == 0) return;
  segment->huge_ranges = static_cast<uint16_t>(segment->huge_ranges & ~overlapped);
  // One call over the ranges from the first demoted to the last: those in
  // between lie wholly inside [first, end), and are demoted too if huge.
  size_t low = static_cast<size_t>(__builtin_ctz(overlapped));
  size_t high = 31 - static_cast<size_t>(__builtin_clz(overlapped));
  os::advise_huge_pages(reinterpret_cast<void*>(segment->slice_address(low * kRangeSlices)),
                        (high - low + 1) * kHugePageSize, false);
}

bool mostly_resident(const Segment* segment, size_t range) {
  return resident_pages(segment->slice_address(range * kRangeSlices)) * kRangeSlices >= kRangePages * kDenseSlices;
}

void note_block(uintptr_t start, size_t bytes) {
  if (!enabled()) return;
  uintptr_t middle = (start + bytes / 2) & ~(kHugePageSize - 1);
  if (middle < start || middle + kHugePageSize > start + bytes) return;
  size_t resident = 0;
  if (!count_resident(middle, &resident)) return;
  // Between the two bounds the last verdict stands.
  if (resident * 8 >= kRangePages * 7) g_dense_blocks.store(true, std::memory_order_relaxed);
  else if (resident * 2 < kRangePages) g_dense_blocks.store(false, std::memory_order_relaxed);
}

bool blocks_dense() { return g_dense_blocks.load(std::memory_order_relaxed) && enabled(); }

void Collapses::run() {
  for (size_t i = 0; i < count; ++i) os::collapse_huge_pages(reinterpret_cast<void*>(start[i]), kHugePageSize);
  count = 0;
}

}  // namespace xalloc::huge_ranges
