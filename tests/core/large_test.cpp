// Large blocks (large.cpp): fresh ones are made resident at once, but for
// their tail, where their thread writes the blocks of their size in full.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "base/config.h"
#include "core_test_util.h"
#include "platform/os.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {

constexpr size_t kPage = xalloc::kOsPageSize;

size_t resident_pages(const void* block, size_t bytes) {
  uint8_t residency[xalloc::os::kResidencyPages];
  EXPECT_LE(bytes / kPage, xalloc::os::kResidencyPages);
  if (!xalloc::os::page_residency(block, bytes, residency)) return SIZE_MAX;
  size_t pages = 0;
  for (size_t i = 0; i < bytes / kPage; ++i) pages += residency[i] & 1;
  return pages;
}

}  // namespace

// A thread that wrote a fresh 256 KiB block in full has its next fresh one
// of that size resident but for the last eighth (the tail, never populated,
// which tells whether the program writes it); one of another size is left
// to fault as it is written; and once a block of 256 KiB is judged with
// its tail unwritten, the next of that size is left alone too.
TEST(Large, FreshBlockIsPopulatedWhereItsThreadWritesBlocksOfItsSizeInFull) {
  if (!xtest::rerun_in_fresh_process()) return;
  std::thread([] {
    constexpr size_t kSize = 256 << 10;
    void* written = xalloc_malloc(kSize);
    ASSERT_NE(written, nullptr);
    ASSERT_EQ(resident_pages(written, kSize), 0u) << "not fresh memory";
    std::memset(written, 1, kSize);
    void* populated = xalloc_malloc(kSize);
    EXPECT_EQ(resident_pages(populated, kSize), kSize / kPage * 7 / 8);
    void* other_size = xalloc_malloc(2 * kSize);
    EXPECT_EQ(resident_pages(other_size, 2 * kSize), 0u);
    void* after_unwritten = xalloc_malloc(kSize);  // `populated`'s tail was not written
    EXPECT_EQ(resident_pages(after_unwritten, kSize), 0u);
    for (void* p : {written, populated, other_size, after_unwritten}) xalloc_free(p);
  }).join();
}
