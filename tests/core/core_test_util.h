// Helpers shared by the core tests of xalloc's components (trim, purge,
// statistics, kept spans, slab pool, heap): sizes, the statistics, a few
// huge blocks. Test files bring the names they use in with
// using-declarations.
#pragma once

#include <cstddef>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace xtest {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSlice = 64 * 1024;

inline xalloc_stats_t stats() {
  xalloc_stats_t s;
  xalloc_get_stats(&s);
  return s;
}

// Four huge blocks of 30 MiB, every other page written (fewer on failure).
inline std::vector<void*> four_touched_huge_blocks() {
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    void* p = xalloc_malloc(30 * kMiB);
    if (p == nullptr) break;
    xtest::touch_pages(p, 30 * kMiB, 2);
    blocks.push_back(p);
  }
  return blocks;
}

}  // namespace xtest
