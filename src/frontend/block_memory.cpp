#include "frontend/block_memory.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "backend/huge_ranges.h"

namespace xalloc {

namespace {

// Blocks of at least this many bytes are zeroed by residency (zero_reused).
constexpr size_t kZeroByResidencyMin = 8 * 1024 * 1024;

// The most pages of a fresh large block's tail (block_memory.h).
constexpr size_t kTailPages = 64;

uint32_t size_bit(size_t pages) { return uint32_t{1} << std::bit_width(pages); }
size_t tail_pages(size_t pages) { return std::clamp<size_t>(pages / 8, 1, kTailPages); }

// Whether every page of the tail of the fresh large block `block` is resident.
bool tail_written(const BigBlock& block) {
  size_t tail_bytes = tail_pages(block.pages) * kOsPageSize;
  return os::resident_bytes_in(block.start + block.pages * kOsPageSize - tail_bytes, tail_bytes) == tail_bytes;
}

}  // namespace

void judge_last_big_block(Heap* heap) {
  BigBlock last = heap->last_big;
  if (last.pages == 0) return;
  heap->last_big = {};
  huge_ranges::note_block(last.start, last.pages * kOsPageSize);
  if (!last.fresh_large) return;
  if (tail_written(last)) heap->large_sizes_written |= size_bit(last.pages);
  else heap->large_sizes_written &= ~size_bit(last.pages);
}

void hand_out_big_block(Heap* heap, uintptr_t start, size_t bytes, bool fresh_large, bool zero) {
  if (heap == &g_empty_heap) return;
  size_t pages = bytes / kOsPageSize;
  if (fresh_large && !zero && (heap->large_sizes_written & size_bit(pages)) != 0)
    os::populate(reinterpret_cast<void*>(start), (pages - tail_pages(pages)) * kOsPageSize);
  heap->last_big = {start, pages, fresh_large};
}

void populate_for_copy(void* block, size_t bytes) {
  const Page* page = lookup_page(reinterpret_cast<uintptr_t>(block));
  if (page == nullptr || page->kind() == PageKind::kSlab || !page->is_zero) return;
  os::populate(block, bytes);  // (which takes whole pages)
}

// Zeroes a block for calloc whose memory held other blocks before (a kept
// span, dirty slices, a cached huge mapping). Writing zeros over all of it
// would make every page resident, and a program that asks again and again
// for a big zeroed table and touches a few pages of it (a sparse bitmap or
// hash table) would pay for all of them each time (64 MiB: 2.5 ms a call,
// glibc 16 us). So each group of pages that is mostly resident is written;
// the others are given back, after which they read as zero (pages swapped
// out too, which mincore counts as not resident). Faulting a page back in
// costs as much as writing 30 resident ones, hence the majority rule.
void zero_reused(void* block, size_t size) {
  if (size < kZeroByResidencyMin) {
    memset(block, 0, size);
    return;
  }
  constexpr size_t kGroupPages = 64;
  static_assert(os::kResidencyPages % kGroupPages == 0);
  auto* start = static_cast<char*>(block);
  size_t length = round_up(size, kOsPageSize);  // a large or huge block's usable bytes are whole pages
  // Groups are handled in runs of one kind, one call each: memset writes a
  // long run with non-temporal stores, which a run cut into groups of
  // 256 KiB would not (64 MiB fully resident: 25% slower that way).
  char* run = start;
  bool run_written = true;
  auto finish_run = [&](char* end) {
    if (end == run) return;
    if (run_written) memset(run, 0, static_cast<size_t>(end - run));
    else os::purge(run, static_cast<size_t>(end - run));
    run = end;
  };
  uint8_t residency[os::kResidencyPages];
  for (size_t done = 0; done < length;) {
    size_t chunk = length - done < sizeof residency * kOsPageSize ? length - done : sizeof residency * kOsPageSize;
    char* chunk_start = start + done;
    if (!os::page_residency(chunk_start, chunk, residency)) {
      finish_run(chunk_start);
      memset(chunk_start, 0, length - done);
      return;
    }
    size_t pages = chunk / kOsPageSize;
    for (size_t first = 0; first < pages; first += kGroupPages) {
      size_t count = pages - first < kGroupPages ? pages - first : kGroupPages;
      size_t resident = 0;
      for (size_t i = first; i < first + count; ++i) resident += residency[i] & 1;
      bool write = resident * 2 > count;
      if (write != run_written) {
        finish_run(chunk_start + first * kOsPageSize);
        run_written = write;
      }
    }
    done += chunk;
  }
  finish_run(start + length);
}

}  // namespace xalloc
