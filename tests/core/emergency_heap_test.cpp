// The emergency heap (support/emergency_heap.h): a thread that reports
// misuse allocates from a static buffer, by bumping a pointer, whatever the
// size; frees of those blocks are ignored. Each test runs in a forked child:
// a thread that has entered never leaves.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "frontend/heap.h"
#include "support/emergency_heap.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

namespace emergency = xalloc::emergency;

// Every allocation of the reporting thread, small, large or huge, comes
// from the buffer, as 16-byte aligned blocks that do not overlap; frees of
// them are ignored, and realloc copies.
TEST(EmergencyHeap, ReportingThreadAllocatesFromTheBuffer) {
  auto r = xtest::run_in_child([] {
    void* before = xalloc_malloc(100);
    if (emergency::owns(before)) return 2;  // the buffer before anyone reports
    emergency::enter();
    if (!emergency::active()) return 3;
    if (xalloc::t_heap != &xalloc::g_empty_heap) return 4;  // the thread left its heap
    char* blocks[4];
    const size_t sizes[4] = {24, 3000, 200000, 100};
    for (int i = 0; i < 4; ++i) {
      blocks[i] = static_cast<char*>(xalloc_malloc(sizes[i]));
      if (!emergency::owns(blocks[i])) return 10 + i;
      if (!xtest::is_aligned(blocks[i], 16)) return 20 + i;
      std::memset(blocks[i], 'a' + i, sizes[i]);
    }
    for (int i = 1; i < 4; ++i)
      if (blocks[i] < blocks[i - 1] + sizes[i - 1]) return 30 + i;  // bumped: each after the one before
    void* aligned = xalloc_aligned_alloc(4096, 64);
    if (!emergency::owns(aligned) || !xtest::is_aligned(aligned, 4096)) return 40;
    xalloc_free(blocks[0]);  // ignored
    void* next = xalloc_malloc(24);
    if (next == blocks[0] || !emergency::owns(next)) return 41;
    auto* grown = static_cast<char*>(xalloc_realloc(blocks[3], 1000));
    if (!emergency::owns(grown) || grown == blocks[3]) return 42;
    for (int i = 0; i < 100; ++i)
      if (grown[i] != 'd') return 43;  // realloc copied the old block
    if (blocks[1][2999] != 'b' || blocks[2][199999] != 'c') return 44;  // nothing overwrote the others
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

// The buffer is 1 MiB: what does not fit fails with ENOMEM, and smaller
// blocks still fit after that.
TEST(EmergencyHeap, WhatDoesNotFitFailsWithENOMEM) {
  auto r = xtest::run_in_child([] {
    emergency::enter();
    errno = 0;
    if (emergency::alloc(size_t{2} << 20, 16) != nullptr) return 2;
    if (errno != ENOMEM) return 3;
    if (xalloc_malloc(size_t{2} << 20) != nullptr) return 4;
    void* small = emergency::alloc(64, 16);
    if (small == nullptr || !emergency::owns(small)) return 5;
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}
