// Borrowing (frontend/borrow.h, XALLOC_BORROW): a heap that needs a new
// slab takes blocks from the inbox of a heap that stopped answering its
// drain requests for kStalledMillis, serves them from lists of its own, and
// sends what it has not used home when it collects. On by default
// (XALLOC_BORROW=0 turns it off). Each test runs in a process of its own,
// with the option set.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backend/segment.h"
#include "core_test_util.h"
#include "frontend/borrow.h"
#include "frontend/heap.h"
#include "frontend/inbox.h"
#include "frontend/outbox.h"
#include "meta/page.h"
#include "meta/size_classes.h"
#include "platform/os.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::fresh_with_env;

namespace {

// Re-runs the current test in a fresh process with XALLOC_BORROW=`value`:
// true in that process, where the test goes on.
bool rerun_with_borrow(const char* value) {
  if (xtest::in_fresh_process()) return true;
  auto r = xtest::run_test_in_fresh_process(xtest::current_test_name(), 60, {{"XALLOC_BORROW", value}});
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "XALLOC_BORROW=" << value << ": " << r.describe();
  return false;
}

xalloc::Heap* owner_of(const void* block) {
  return xalloc::lookup_page(reinterpret_cast<uintptr_t>(block))->owner;
}

constexpr size_t kSize = 256;

// What happened when a grown-up heap with no slab of kSize bytes allocated
// two of them while another heap sat on 768 KiB of such blocks that a
// third thread had freed for it (a "stalled" heap: asked to drain, and
// sent kStalledBytes since), then collected. The stall's start is set to
// `stalled_ms_ago` milliseconds before the borrower's malloc (negative: in
// the future), so that no scheduling delay of the test's threads decides.
struct Outcome {
  xalloc::Heap* stalled = nullptr;
  xalloc::Heap* borrower = nullptr;
  size_t pending_before = 0;          // the stalled heap's inbox bytes before the borrower's malloc
  size_t pending_after = 0;           // ... after it
  size_t pending_after_collect = 0;   // ... after the borrower collected
  xalloc::Heap* first_owner = nullptr;   // owners of the two blocks
  xalloc::Heap* second_owner = nullptr;
  bool served_from_borrowed = false;  // the class's serving table entry is the borrowed list
  bool borrowed_left_after_collect = true;
  uint32_t stalled_pause = 0;
  bool stall_timed = false;           // the sender that made it stalled noted when
};

Outcome stall_then_allocate(int64_t stalled_ms_ago) {
  Outcome o;
  const unsigned cls = xalloc::class_of(kSize);
  // The borrower first: grown up (a young heap does not borrow), before
  // any heap stalls.
  xtest::StepThread borrower;
  std::vector<void*> own;
  borrower.run([&] {
    while (xalloc::t_heap == &xalloc::g_empty_heap || xalloc::t_heap->young) own.push_back(xalloc_malloc(1024));
    o.borrower = xalloc::t_heap;
  });
  xtest::StepThread owner;
  std::vector<void*> blocks(3 * xalloc::kStalledBytes / 2 / kSize);
  owner.run([&] {
    for (void*& p : blocks) p = xalloc_malloc(kSize);
    o.stalled = xalloc::t_heap;
  });
  std::thread([&] {
    for (void* p : blocks) xalloc_free(p);
    xalloc_thread_collect();
  }).join();
  EXPECT_NE(o.stalled->drain_requested.load(), 0u);
  o.pending_before = o.stalled->inbox_bytes.load();
  uint64_t since = o.stalled->stalled_since.load();
  o.stall_timed = since != 0 && since <= xalloc::os::monotonic_ms();
  borrower.run([&] {
    o.stalled->stalled_since.store(xalloc::os::monotonic_ms() - stalled_ms_ago);
    void* first = xalloc_malloc(kSize);
    void* second = xalloc_malloc(kSize);
    o.pending_after = o.stalled->inbox_bytes.load();
    o.first_owner = owner_of(first);
    o.second_owner = owner_of(second);
    xalloc::Heap* self = xalloc::t_heap;
    o.served_from_borrowed = self->borrowed != nullptr && self->serving[cls] == &self->borrowed->list[cls];
    o.stalled_pause = o.stalled->borrow_pause.load();
    xalloc_free(first);
    xalloc_free(second);
    xalloc_thread_collect();
    o.borrowed_left_after_collect = self->borrowed != nullptr && self->borrowed->list[cls].free != nullptr;
    o.pending_after_collect = o.stalled->inbox_bytes.load();
    for (void* p : own) xalloc_free(p);
  });
  owner.run([] { xalloc_thread_collect(); });  // drains what is left
  return o;
}

}  // namespace

// The borrower takes kBorrowBytes of the stalled heap's inbox: its blocks
// stay the stalled heap's (its slabs count them in use), the borrower
// serves them, the stalled heap does not borrow back for a while, and
// collect sends everything the borrower holds home.
TEST(Borrow, HeapWithoutASlabBorrowsFromAStalledHeapsInbox) {
  if (!rerun_with_borrow("1")) return;
  Outcome o = stall_then_allocate(1000);
  ASSERT_GE(o.pending_before, xalloc::kStalledBytes);
  EXPECT_TRUE(o.stall_timed) << "the sender did not note when the heap stalled";
  EXPECT_EQ(o.first_owner, o.stalled) << "the block came from a slab of the borrower's own";
  EXPECT_EQ(o.second_owner, o.stalled);
  EXPECT_TRUE(o.served_from_borrowed) << "the class is not served from the borrowed list";
  EXPECT_EQ(o.pending_before - o.pending_after, xalloc::kBorrowBytes) << "borrowed other than kBorrowBytes";
  EXPECT_EQ(o.stalled_pause, xalloc::kBorrowPause);
  EXPECT_FALSE(o.borrowed_left_after_collect) << "collect left borrowed blocks with the borrower";
  EXPECT_EQ(o.pending_after_collect, o.pending_before) << "borrowed blocks did not all go home";
}

void expect_nothing_borrowed(const Outcome& o) {
  ASSERT_GE(o.pending_before, xalloc::kStalledBytes);
  EXPECT_EQ(o.first_owner, o.borrower);
  EXPECT_EQ(o.second_owner, o.borrower);
  EXPECT_FALSE(o.served_from_borrowed);
  EXPECT_EQ(o.pending_after, o.pending_before);
  EXPECT_EQ(o.stalled_pause, 0u);
}

// With XALLOC_BORROW=0 the same heap makes a slab of its own and leaves
// the stalled heap's inbox alone.
TEST(Borrow, NothingIsBorrowedWithoutTheOption) {
  if (!rerun_with_borrow("0")) return;
  expect_nothing_borrowed(stall_then_allocate(1000));
}

// A heap stalled for less than kStalledMillis (times the threads per
// processor) may only be waiting for its core: it is left alone.
TEST(Borrow, HeapStalledBrieflyIsLeftAlone) {
  if (!rerun_with_borrow("1")) return;
  expect_nothing_borrowed(stall_then_allocate(0));
  expect_nothing_borrowed(stall_then_allocate(-1000));  // renewed since the borrower read the clock
}

// --- under load: borrowed blocks keep their contents -------------------------------

// Threads hand batches of blocks round a ring and free what they are
// handed, each now and then sleeping (stalled, with blocks piling up in its
// inbox, for ten times kStalledMillis: more than 5 threads on one
// processor wait) while the others borrow them. Every block keeps its
// contents from malloc to free, whichever heap served it; the borrowing
// paths (steal, push-back, return at exit) race with the owners' drains,
// which ThreadSanitizer checks in the tsan stage.
TEST(Options, BorrowedBlocksKeepTheirContents) {
  auto r = fresh_with_env({{"XALLOC_BORROW", "1"}}, [] {
    constexpr int kThreads = 4, kRounds = 40, kBatch = 3000;
    struct Mailbox {
      std::mutex lock;
      std::vector<std::pair<unsigned char*, size_t>> blocks;
    };
    static Mailbox boxes[kThreads];
    static std::atomic<int> bad{0};
    auto pattern = [](const unsigned char* p) { return static_cast<unsigned char>(reinterpret_cast<uintptr_t>(p) >> 4); };
    auto take_and_free = [&](Mailbox& box) {
      std::vector<std::pair<unsigned char*, size_t>> mine;
      {
        std::lock_guard<std::mutex> guard(box.lock);
        mine.swap(box.blocks);
      }
      for (auto [p, n] : mine) {
        for (size_t i = 0; i < n; ++i)
          if (p[i] != pattern(p)) bad++;
        xalloc_free(p);
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        uint64_t seed = 0x9E3779B97F4A7C15ull * (t + 1);
        for (int round = 0; round < kRounds; ++round) {
          std::vector<std::pair<unsigned char*, size_t>> batch;
          for (int i = 0; i < kBatch; ++i) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t n = 16 + (seed >> 33) % 1500;
            auto* p = static_cast<unsigned char*>(xalloc_malloc(n));
            if (p == nullptr) {
              bad++;
              continue;
            }
            memset(p, pattern(p), n);
            batch.emplace_back(p, n);
          }
          {
            Mailbox& next = boxes[(t + 1) % kThreads];
            std::lock_guard<std::mutex> guard(next.lock);
            next.blocks.insert(next.blocks.end(), batch.begin(), batch.end());
          }
          take_and_free(boxes[t]);
          if (round % kThreads == t) usleep(10000 * xalloc::kStalledMillis);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (Mailbox& box : boxes) take_and_free(box);
    return bad.load() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << "exit 1: a block lost its contents; " << r.describe();
}
