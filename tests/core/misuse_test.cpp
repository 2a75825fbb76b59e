// Heap misuse reports: each runs in a forked child, which must die of
// SIGABRT after printing the exact report line (with the exact address).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/segment.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::hex_ptr;
using xtest::run_in_child;

namespace {

::testing::AssertionResult aborted_with_line(const xtest::ChildResult& r, const std::string& line) {
  if (!(r.signaled() && r.signal() == SIGABRT))
    return ::testing::AssertionFailure() << "expected death by SIGABRT; child " << r.describe();
  if (!xtest::has_line(r.err, line))
    return ::testing::AssertionFailure() << "expected the line\n  " << line << "\nin stderr:\n" << r.err;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult aborted_with_prefix(const xtest::ChildResult& r, const std::string& prefix) {
  if (!(r.signaled() && r.signal() == SIGABRT))
    return ::testing::AssertionFailure() << "expected death by SIGABRT; child " << r.describe();
  if (!xtest::has_line_starting(r.err, prefix))
    return ::testing::AssertionFailure() << "expected a line starting\n  " << prefix << "\nin stderr:\n" << r.err;
  return ::testing::AssertionSuccess();
}

// "(N-byte class)" as a report names the class of `block`: a young heap
// (src/heap.h) may serve a size from a larger class than its own.
std::string class_label(const void* block) {
  char label[48];
  std::snprintf(label, sizeof label, "(%zu-byte class)", xalloc_usable_size(block));
  return label;
}

}  // namespace

TEST(Misuse, DoubleFreeIsReportedWithClass) {
  // The block is allocated before the fork, so the address is known here.
  void* keep = xalloc_malloc(48);
  void* p = xalloc_malloc(48);
  ASSERT_NE(p, nullptr);
  auto r = run_in_child([p] {
    xalloc_free(p);
    xalloc_free(p);
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in free()"));
  xalloc_free(p);
  xalloc_free(keep);
}

// Regression (tests/KNOWN_BUGS.md #13): the free marker was the slab descriptor's address, which
// xalloc leaves on the stack; a copy of it in a live block aborted as a false double free.
// Programs copy stale bytes into live blocks: an uninitialised field copied
// from a temporary on the stack, where the allocator's own code left an
// address (clang 14's APValue does this, and with xalloc built at -O0 every
// C++ compile aborted), a block's pointer to itself, the second word of a
// freed block. None of them may read as the block's free marker.
TEST(Misuse, StaleValuesInALiveBlockAreNotTakenForAFreeMarker) {
  void* keep = xalloc_malloc(48);
  void* freed = xalloc_malloc(48);
  void* p = xalloc_malloc(48);
  ASSERT_NE(p, nullptr);
  xalloc_free(freed);
  auto address = reinterpret_cast<uintptr_t>(p);
  const uintptr_t stale[] = {
      reinterpret_cast<uintptr_t>(xalloc::page_of(xalloc::segment_of(address), address)),  // its slab's descriptor
      address,                                                                             // itself
      reinterpret_cast<const uintptr_t*>(freed)[1],  // what a free block of its slab holds there
  };
  for (uintptr_t value : stale) {
    auto r = run_in_child([p, value] {
      reinterpret_cast<uintptr_t*>(p)[1] = value;
      xalloc_free(p);
      return 0;
    });
    EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "second word " << std::hex << value << ": child " << r.describe()
                                                  << "\n" << r.err;
  }
  xalloc_free(p);
  xalloc_free(keep);
}

// A slice that no span has used since its segment was mapped maps to its
// own descriptor, still all zero (span_allocator.h): a pointer into it is
// free memory to free(), realloc(), malloc_usable_size() and xalloc_owns().
TEST(Misuse, PointerIntoANeverUsedSliceIsReported) {
  void* p = xalloc_malloc(48);
  ASSERT_NE(p, nullptr);
  xalloc::Segment* segment = xalloc::segment_of(reinterpret_cast<uintptr_t>(p));
  size_t unused = 0;
  for (size_t i = xalloc::kSlicesPerSegment - 2; i > 1 && unused == 0; --i) {
    if (segment->page_of_slice[i] == &segment->pages[i] && segment->pages[i].slice_count == 0) unused = i;
  }
  if (unused == 0) GTEST_SKIP() << "every slice of the segment has been used";
  void* inside = reinterpret_cast<void*>(segment->slice_address(unused) + 4096 + 48);
  EXPECT_EQ(xalloc_usable_size(inside), 0u);
  EXPECT_FALSE(xalloc_owns(inside));
  auto freed = run_in_child([inside] {
    xalloc_free(inside);
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(freed, "xalloc: invalid free (pointer into free memory) of " + hex_ptr(inside) +
                                           " in free()"));
  auto reallocated = run_in_child([inside] {
    return xalloc_realloc(inside, 100) == nullptr ? 3 : 4;
  });
  EXPECT_TRUE(aborted_with_line(reallocated, "xalloc: invalid realloc (pointer into free memory) of " +
                                                 hex_ptr(inside) + " in realloc()"));
  xalloc_free(p);
}

// malloc_usable_size of an interior pointer counts the bytes up to the
// block's usable end, and of a pointer past that end none: not a size
// wrapped around, which a program trusting it would write past the block.
TEST(Misuse, UsableSizePastABlocksUsableEndIsZero) {
  constexpr size_t kLarge = 70000;  // 73,728 usable bytes in a span of two 64 KiB slices
  auto* large = static_cast<char*>(xalloc_malloc(kLarge));
  ASSERT_NE(large, nullptr);
  size_t usable = xalloc_usable_size(large);
  ASSERT_LT(usable, size_t{128} << 10);
  EXPECT_EQ(xalloc_usable_size(large + 1000), usable - 1000);
  EXPECT_EQ(xalloc_usable_size(large + usable), 0u);
  EXPECT_EQ(xalloc_usable_size(large + usable + 4096), 0u);
  xalloc_free(large);
  // Freed, its span kept by this thread's heap for the next large block.
  EXPECT_EQ(xalloc_usable_size(large + 1000), 0u);

  constexpr size_t kHuge = size_t{40} << 20;
  auto* huge = static_cast<char*>(xalloc_malloc(kHuge));
  ASSERT_NE(huge, nullptr);
  size_t huge_usable = xalloc_usable_size(huge);
  // (Past its first 32 MiB, a huge block's granules are found from its first.)
  EXPECT_EQ(xalloc_usable_size(huge + huge_usable - 1), 1u);
  EXPECT_EQ(xalloc_usable_size(huge + huge_usable + 4096), 0u);
  EXPECT_TRUE(xalloc_owns(huge + (size_t{33} << 20)));
  xalloc_free(huge);
  EXPECT_FALSE(xalloc_owns(huge + (size_t{33} << 20)));

  auto* small = static_cast<char*>(xalloc_malloc(100));
  ASSERT_NE(small, nullptr);
  size_t small_usable = xalloc_usable_size(small);
  EXPECT_EQ(xalloc_usable_size(small + 10), small_usable - 10);
  xalloc_free(small);
}

// Regression (tests/KNOWN_BUGS.md #14): a double free of a block not carved yet was accepted.
// A double free of a block whose slab was emptied, given back (purged) and
// made again for the same class before carving reached the block: nothing
// in the block says "free" any more, but no block was handed out there.
TEST(Misuse, FreeOfABlockNotCarvedYetIsReported) {
  constexpr size_t kSize = 28000;  // carved one block at a time
  auto r = run_in_child([] {
    void* first = nullptr;
    void* second = nullptr;
    // A thread of its own, whose exit gives the empty slab back; trim purges it.
    std::thread([&] {
      first = xalloc_malloc(kSize);
      second = xalloc_malloc(kSize);
      xalloc_free(first);
      xalloc_free(second);
    }).join();
    xalloc_trim(0);
    // New slabs of the class, until one is made in the same memory (its
    // first block is `first`; `second` is not carved yet).
    bool reused = false;
    for (int i = 0; i < 1000 && !reused; ++i) reused = xalloc_malloc(kSize) == first;
    if (!reused) return 2;
    std::printf("block %s\n", hex_ptr(second).c_str());
    std::fflush(stdout);
    xalloc_free(second);
    return 0;
  });
  if (r.exited() && r.exit_code() == 2) GTEST_SKIP() << "the new slab did not reuse the old one's memory";
  size_t cls = 28672;
  EXPECT_TRUE(aborted_with_prefix(r, "xalloc: invalid free (pointer into free memory) of 0x"));
  EXPECT_NE(r.err.find("(" + std::to_string(cls) + "-byte class) in free()"), std::string::npos) << r.err;
}

TEST(Misuse, DoubleFreeOfOtherClasses) {
  for (size_t size : {size_t{1}, size_t{100}, size_t{1000}, size_t{20000}}) {
    void* keep = xalloc_malloc(size);
    void* p = xalloc_malloc(size);
    size_t cls = xalloc_usable_size(p);
    auto r = run_in_child([p] {
      xalloc_free(p);
      xalloc_free(p);
      return 0;
    });
    EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " (" + std::to_string(cls) +
                                         "-byte class) in free()"))
        << "size " << size;
    xalloc_free(p);
    xalloc_free(keep);
  }
}

TEST(Misuse, DoubleFreeAfterOtherBlocksWereFreed) {
  // The block is no longer at the head of its free list.
  void* blocks[8];
  for (void*& b : blocks) b = xalloc_malloc(48);
  void* victim = blocks[3];
  auto r = run_in_child([&blocks, victim] {
    xalloc_free(victim);
    for (int i = 4; i < 8; ++i) xalloc_free(blocks[i]);
    xalloc_free(victim);
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(
      r, "xalloc: double free of " + hex_ptr(victim) + " " + class_label(victim) + " in free()"));
  for (void* b : blocks) xalloc_free(b);
}

TEST(Misuse, DoubleFreeAcrossThreads) {
  // First free from another thread (a remote free), second from the owner.
  void* keep = xalloc_malloc(48);
  void* p = xalloc_malloc(48);
  auto r = run_in_child([p] {
    std::thread t([p] { xalloc_free(p); });
    t.join();
    xalloc_free(p);
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in free()"));
  xalloc_free(p);
  xalloc_free(keep);
}

// The cross-thread free has its own checks (free_not_local): the second
// free comes from a thread that does not own the slab.
TEST(Misuse, DoubleFreeByAnotherThreadIsReported) {
  void* keep = xalloc_malloc(48);
  void* p = xalloc_malloc(48);
  auto r = run_in_child([p] {
    xalloc_free(p);
    std::thread t([p] { xalloc_free(p); });
    t.join();
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in free()"));
  // Both frees remote, from two threads one after the other.
  r = run_in_child([p] {
    std::thread first([p] { xalloc_free(p); });
    first.join();
    std::thread second([p] { xalloc_free(p); });
    second.join();
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in free()"));
  // Both from one other thread, while the first still waits in its outbox.
  r = run_in_child([p] {
    std::thread t([p] {
      xalloc_free(p);
      xalloc_free(p);
    });
    t.join();
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in free()"));
  xalloc_free(p);
  xalloc_free(keep);
}

// A block that another thread freed is on its way to its owner: the head
// of the run it leads (frontend/remote_free.h) says where the run ends and
// how long it is, and a program that writes the block after its free
// damages that. The owner finds it when the run comes back, before it
// links anything.
TEST(Misuse, ABlockWrittenAfterAnotherThreadFreedItIsReported) {
  constexpr size_t kSize = 64;
  constexpr size_t kBlocks = 8;
  void* blocks[kBlocks];
  for (void*& p : blocks) p = xalloc_malloc(kSize);
  auto r = run_in_child([&blocks] {
    std::thread t([&blocks] {
      for (void* p : blocks) xalloc_free(p);
      xalloc_thread_collect();  // sends them: one run, led by the first freed
    });
    t.join();
    std::memset(blocks[0], 0x41, kSize);
    xalloc_thread_collect();  // the owner takes the run back
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: heap corruption: " + hex_ptr(blocks[0]) + " " + class_label(blocks[0]) +
                                       " was written after another thread freed it"));
  for (void* p : blocks) xalloc_free(p);
}

// Threads that find misuse at the same moment: one report, not several
// interleaved (they would share the emergency buffer and the symbolizer).
TEST(Misuse, SimultaneousMisuseGivesOneReport) {
  constexpr int kThreads = 4;
  auto r = run_in_child([] {
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&ready] {
        void* p = xalloc_malloc(48);
        xalloc_free(p);
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        xalloc_free(p);
      });
    }
    for (std::thread& t : threads) t.join();
    return 0;
  });
  ASSERT_TRUE(r.signaled() && r.signal() == SIGABRT) << r.describe();
  int reports = 0;
  for (const std::string& line : xtest::split_lines(r.err)) reports += line.rfind("xalloc: double free of ", 0) == 0;
  EXPECT_EQ(reports, 1) << r.err;
}

// A slab whose blocks were all freed goes to the slab pool (src/slab_pool.h)
// with no owner; a block of it freed again, even after a write over its
// free marker, is reported at that free.
TEST(Misuse, DoubleFreeIntoAPooledSlabIsReported) {
  std::vector<char*> blocks;  // 1.9 MB of 640-byte blocks of an exited thread
  std::thread([&] {
    for (int i = 0; i < 3000; ++i) blocks.push_back(static_cast<char*>(xalloc_malloc(640)));
  }).join();
  char* victim = blocks[blocks.size() / 2];
  auto r = run_in_child([&] {
    xalloc_trim(0);  // room in the pool for all of them
    for (char* b : blocks) xalloc_free(b);
    memset(victim, 0x5a, 16);  // a write after free over the free marker
    xalloc_free(victim);
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(
      r, "xalloc: double free of " + hex_ptr(victim) + " " + class_label(victim) + " in free()"));
  for (char* b : blocks) xalloc_free(b);
}

TEST(Misuse, InvalidFreesByAnotherThreadAreReported) {
  void* keep = xalloc_malloc(48);
  auto* p = static_cast<char*>(xalloc_malloc(48));
  auto* large = static_cast<char*>(xalloc_malloc(300000));
  void* inner = p + 16;
  auto r = run_in_child([inner] {
    std::thread t([inner] { xalloc_free(inner); });
    t.join();
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(
      r, "xalloc: invalid free (not the start of a block) of " + hex_ptr(inner) + " " + class_label(p) + " in free()"));
  r = run_in_child([large] {
    xalloc_free(large);
    std::thread t([large] { xalloc_free(large); });
    t.join();
    return 0;
  });
  // A freed large span may have merged with free space around it: either
  // report names the address.
  EXPECT_TRUE(aborted_with_prefix(r, "xalloc: ")) << "a large block freed again by another thread";
  EXPECT_NE(r.err.find(hex_ptr(large)), std::string::npos) << r.err;
  xalloc_free(large);
  xalloc_free(p);
  xalloc_free(keep);
}

TEST(Misuse, DoubleFreeOfLargeBlockAborts) {
  void* keep = xalloc_malloc(200000);
  void* p = xalloc_malloc(200000);
  ASSERT_NE(p, nullptr);
  auto r = run_in_child([p] {
    xalloc_free(p);
    xalloc_free(p);
    return 0;
  });
  EXPECT_TRUE(aborted_with_prefix(r, "xalloc: ")) << "double free of a large block";
  xalloc_free(p);
  xalloc_free(keep);
}

// A large block freed by another thread waits for its allocating thread
// with no usable bytes (frontend/kept_spans.cpp, returned spans): freed again, it is
// reported.
TEST(Misuse, DoubleFreeOfLargeBlockByAnotherThreadAborts) {
  void* keep = xalloc_malloc(200000);
  void* p = xalloc_malloc(200000);
  ASSERT_NE(p, nullptr);
  auto r = run_in_child([p] {
    std::thread([p] {
      xalloc_free(p);
      xalloc_free(p);
    }).join();
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " (large block) in free()")) << r.err;
  xalloc_free(p);
  xalloc_free(keep);
}

// Regression test (tests/KNOWN_BUGS.md #1): a huge block freed twice used to
// be put in the huge cache twice, unreported; the cache list became circular
// and the next huge malloc spun forever.
TEST(Misuse, DoubleFreeOfHugeBlockAborts) {
  void* p = xalloc_malloc(size_t{20} << 20);
  ASSERT_NE(p, nullptr);
  auto r = run_in_child(
      [p] {
        xalloc_free(p);
        xalloc_free(p);
        // If the second free was accepted, this is where it shows.
        void* a = xalloc_malloc(size_t{20} << 20);
        void* b = xalloc_malloc(size_t{20} << 20);
        return a == b ? 3 : 0;
      },
      5);
  EXPECT_TRUE(aborted_with_prefix(r, "xalloc: ")) << "double free of a 20 MiB block";
  xalloc_free(p);
}

TEST(Misuse, InteriorPointerOfSmallBlock) {
  void* keep = xalloc_malloc(48);
  auto* p = static_cast<char*>(xalloc_malloc(48));
  for (size_t offset : {size_t{16}, size_t{8}, size_t{1}, size_t{47}}) {
    void* inner = p + offset;
    auto r = run_in_child([inner] {
      xalloc_free(inner);
      return 0;
    });
    EXPECT_TRUE(aborted_with_prefix(r, "xalloc: invalid free (not the start of a block) of " + hex_ptr(inner)))
        << "offset " << offset;
    EXPECT_TRUE(aborted_with_line(
        r, "xalloc: invalid free (not the start of a block) of " + hex_ptr(inner) + " " + class_label(p) +
               " in free()"));
  }
  xalloc_free(p);
  xalloc_free(keep);
}

TEST(Misuse, InteriorPointerOfLargeBlock) {
  auto* p = static_cast<char*>(xalloc_malloc(300000));
  for (size_t offset : {size_t{16}, size_t{4096}, size_t{70000}, size_t{299999}}) {
    void* inner = p + offset;
    auto r = run_in_child([inner] {
      xalloc_free(inner);
      return 0;
    });
    // The block's usable size: the request rounded up to whole pages.
    EXPECT_TRUE(aborted_with_line(
        r, "xalloc: invalid free (not the start of a block) of " + hex_ptr(inner) + " (303104-byte large block) in free()"))
        << "offset " << offset << ": " << r.err;
  }
  xalloc_free(p);
}

static void expect_interior_free_reported(char* p, size_t offset) {
  void* inner = p + offset;
  auto r = run_in_child([inner] {
    xalloc_free(inner);
    return 0;
  });
  EXPECT_TRUE(aborted_with_prefix(r, "xalloc: invalid free (not the start of a block) of " + hex_ptr(inner)))
      << "offset " << offset << " into a huge block";
}

TEST(Misuse, InteriorPointerOfHugeBlock) {
  // Inside the first 32 MiB of the block's mapping.
  auto* p = static_cast<char*>(xalloc_malloc(size_t{80} << 20));
  ASSERT_NE(p, nullptr);
  for (size_t offset : {size_t{16}, size_t{1} << 20, size_t{20} << 20}) expect_interior_free_reported(p, offset);
  xalloc_free(p);
}

// Regression test (tests/KNOWN_BUGS.md #2): beyond the first 32 MiB of a huge
// mapping the report used to say "invalid free (pointer inside a block)";
// it names the block's size as before it.
TEST(Misuse, InteriorPointerFarIntoHugeBlock) {
  const size_t size = size_t{80} << 20;
  auto* p = static_cast<char*>(xalloc_malloc(size));
  ASSERT_NE(p, nullptr);
  std::string block = " (" + std::to_string(xalloc_usable_size(p)) + "-byte huge block) in free()";
  for (size_t offset : {size_t{16}, size_t{40} << 20, size - 16}) {
    void* inner = p + offset;
    auto r = run_in_child([inner] {
      xalloc_free(inner);
      return 0;
    });
    EXPECT_TRUE(aborted_with_line(r, "xalloc: invalid free (not the start of a block) of " + hex_ptr(inner) + block))
        << "offset " << offset << ": " << r.err;
  }
  xalloc_free(p);
}

TEST(Misuse, FreeOfStackAddress) {
  auto r = run_in_child([] {
    volatile int local = 1;
    void* addr = const_cast<int*>(&local);
    std::string line = "xalloc: invalid free (pointer not allocated by xalloc) of " + hex_ptr(addr) + " in free()";
    // Tell the parent which line to expect (it cannot know the child's stack).
    std::fprintf(stderr, "expect: %s\n", line.c_str());
    std::fflush(stderr);
    xalloc_free(addr);
    return 0;
  });
  ASSERT_TRUE(r.signaled() && r.signal() == SIGABRT) << r.describe();
  std::string expected;
  for (const std::string& l : xtest::split_lines(r.err)) {
    if (l.rfind("expect: ", 0) == 0) expected = l.substr(8);
  }
  ASSERT_FALSE(expected.empty());
  EXPECT_TRUE(xtest::has_line(r.err, expected)) << "expected\n  " << expected << "\nin\n" << r.err;
}

TEST(Misuse, FreeOfForeignHeapAndStaticPointers) {
  static int in_data = 0;
  void* system_block = std::malloc(64);  // the system allocator's
  for (void* addr : {static_cast<void*>(&in_data), system_block}) {
    auto r = run_in_child([addr] {
      xalloc_free(addr);
      return 0;
    });
    EXPECT_TRUE(
        aborted_with_line(r, "xalloc: invalid free (pointer not allocated by xalloc) of " + hex_ptr(addr) + " in free()"));
  }
  std::free(system_block);
}

TEST(Misuse, ReportedByFreeSizedToo) {
  void* keep = xalloc_malloc(48);
  void* p = xalloc_malloc(48);
  auto r = run_in_child([p] {
    xalloc_free_sized(p, 48);
    xalloc_free_sized(p, 48);
    return 0;
  });
  EXPECT_TRUE(aborted_with_line(r, "xalloc: double free of " + hex_ptr(p) + " " + class_label(p) + " in free_sized()"));
  xalloc_free(p);
  xalloc_free(keep);
}

TEST(Misuse, CorrectUseDoesNotAbort) {
  // The same sequences without the mistake exit normally (the checks above
  // are not just catching every child).
  auto r = run_in_child([] {
    void* p = xalloc_malloc(48);
    void* q = xalloc_malloc(300000);
    std::thread t([p] { xalloc_free(p); });
    t.join();
    xalloc_free(q);
    return 0;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  EXPECT_EQ(r.err, "");
}
