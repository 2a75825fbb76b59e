// The thread registry (frontend/thread_registry.h): process start-up, a heap
// per thread, orphans of exited threads adopted by new ones, frees into an
// orphan drained by their sender, the heap shared by threads past their
// heap's teardown, and fork() before or during start-up.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/segment.h"
#include "core_test_util.h"
#include "frontend/heap.h"
#include "frontend/inbox.h"
#include "frontend/thread_registry.h"
#include "meta/page.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::kMiB;

// A new thread's heap is one page: its outbox's stage and lists, beside
// it, stay untouched (not resident) until the thread frees a block of
// another thread. Run in a fresh process, where the thread's heap is a new
// one (not an orphan adopted, whose outbox has been used).
TEST(ThreadRegistry, ANewHeapIsOnePageUntilItsThreadFreesAnotherThreadsBlock) {
  ASSERT_LE(sizeof(xalloc::Heap), xalloc::kOsPageSize) << "the heap outgrew a page";
  auto r = xtest::fresh_with_env({}, [] {
    void* foreign = xalloc_malloc(64);  // the main thread's heap first
    int code = 0;
    std::thread([&] {
      void* own = xalloc_malloc(64);
      auto base = reinterpret_cast<uintptr_t>(xalloc::t_heap);
      if (base % xalloc::kOsPageSize != 0) code = 10;
      constexpr size_t kPages = xalloc::kHeapBytes / xalloc::kOsPageSize;
      unsigned char resident[kPages];
      auto pages_resident = [&] {
        if (mincore(reinterpret_cast<void*>(base), xalloc::kHeapBytes, resident) != 0) return size_t{999};
        size_t n = 0;
        for (unsigned char page : resident) n += page & 1;
        return n;
      };
      if (code == 0 && pages_resident() != 1) code = 11;
      if (code == 0 && (resident[0] & 1) == 0) code = 12;
      xalloc_free(foreign);  // staged in the outbox
      xalloc_thread_collect();  // and sent
      if (code == 0 && pages_resident() < 3) code = 13;  // the stage and the lists written
      xalloc_free(own);
    }).join();
    return code;
  });
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

// A thread's heap outlives it: at exit it becomes an orphan, no longer
// counted live, keeping the slabs that hold live blocks; the next thread
// that needs a heap adopts it, slabs and all, instead of making one.
TEST(ThreadRegistry, ExitedThreadsHeapIsAdoptedByTheNextThread) {
  const uint32_t live_before = xalloc::live_heap_count();
  xalloc::Heap* exited = nullptr;
  void* left = nullptr;
  std::thread([&] {
    left = xalloc_malloc(48);  // outlives the thread
    exited = xalloc::t_heap;
  }).join();
  ASSERT_NE(exited, &xalloc::g_empty_heap);
  EXPECT_EQ(exited->state.load(), xalloc::HeapState::kOrphan);
  EXPECT_EQ(xalloc::live_heap_count(), live_before);
  const xalloc::Page* slab = xalloc::lookup_page(reinterpret_cast<uintptr_t>(left));
  ASSERT_NE(slab, nullptr);
  EXPECT_EQ(slab->owner, exited) << "the slab of a live block left its exited thread's heap";
  xalloc::Heap* adopted = nullptr;
  xalloc::HeapState state = xalloc::HeapState::kDead;
  uint32_t live_during = 0;
  const size_t heaps_before = xtest::stats().threads;
  std::thread([&] {
    xalloc_free(xalloc_malloc(16));
    adopted = xalloc::t_heap;
    state = adopted->state.load();
    live_during = xalloc::live_heap_count();
    xalloc_free(left);  // a block of its own heap now
  }).join();
  EXPECT_EQ(adopted, exited) << "the next thread did not adopt the orphan";
  EXPECT_EQ(state, xalloc::HeapState::kActive);
  EXPECT_EQ(live_during, live_before + 1);
  EXPECT_EQ(xtest::stats().threads, heaps_before) << "a heap was made while an orphan waited";
}

// The live heap count follows the threads that have a heap: a thread gets
// one with its first allocation, and gives it up when it exits.
TEST(ThreadRegistry, LiveHeapCountFollowsThreadsWithAHeap) {
  constexpr size_t kThreads = 6;
  const uint32_t before = xalloc::live_heap_count();
  std::vector<std::unique_ptr<xtest::StepThread>> threads;
  for (size_t i = 0; i < kThreads; ++i) threads.push_back(std::make_unique<xtest::StepThread>());
  EXPECT_EQ(xalloc::live_heap_count(), before) << "threads that have not allocated count as heaps";
  std::vector<void*> blocks(kThreads);
  for (size_t i = 0; i < kThreads; ++i) threads[i]->run([&blocks, i] { blocks[i] = xalloc_malloc(100); });
  EXPECT_EQ(xalloc::live_heap_count(), before + kThreads);
  threads[0]->run([] { xalloc_free(xalloc_malloc(5000)); });  // a second allocation: no second heap
  EXPECT_EQ(xalloc::live_heap_count(), before + kThreads);
  for (size_t i = 0; i < kThreads / 2; ++i) threads[i]->finish();
  EXPECT_EQ(xalloc::live_heap_count(), before + kThreads - kThreads / 2);
  threads.clear();
  EXPECT_EQ(xalloc::live_heap_count(), before);
  for (void* p : blocks) xalloc_free(p);
  EXPECT_EQ(xalloc::live_heap_count(), before);
}

// Blocks freed into an orphan's slabs do not wait for a thread to adopt
// it: the sender drains the orphan's inbox itself (orphan_collect), so the
// slabs empty and leave the orphan.
TEST(ThreadRegistry, FreesIntoAnOrphanAreDrainedByTheirSender) {
  xalloc::Heap* exited = nullptr;
  std::vector<void*> blocks(2000);
  std::thread([&] {
    for (void*& p : blocks) p = xalloc_malloc(200);
    exited = xalloc::t_heap;
  }).join();
  ASSERT_EQ(exited->state.load(), xalloc::HeapState::kOrphan);
  const xalloc::Page* slab = xalloc::lookup_page(reinterpret_cast<uintptr_t>(blocks[0]));
  ASSERT_EQ(slab->owner, exited);
  for (void* p : blocks) xalloc_free(p);
  xalloc_thread_collect();  // sends what this thread staged
  EXPECT_FALSE(xalloc::inbox_pending(exited)) << "blocks wait in an orphan's inbox";
  EXPECT_EQ(exited->state.load(), xalloc::HeapState::kOrphan) << "the test's own thread adopted the heap";
  EXPECT_NE(slab->owner, exited) << "an emptied slab stayed with the orphan";
}

// --- orphans drained without trim, the heap of exiting threads, start-up and fork ---

TEST(Churn, BlocksOfAnExitedThreadComeBackWithoutTrim) {
  // The owner is gone and no new thread adopts its heap: the freeing thread
  // must drain the orphan's inbox itself, so the slabs empty and return.
  // (In a fresh process: after other tests' peaks, the purge policy may
  // rightly keep the emptied slabs resident for the delay.)
  if (!xtest::rerun_in_fresh_process()) return;
  xalloc_thread_collect();
  xalloc_stats_t before;
  xalloc_get_stats(&before);
  std::vector<void*> blocks;
  std::thread([&blocks] {
    for (size_t i = 0; i < 32 * kMiB / 1024; ++i) blocks.push_back(xalloc_malloc(1000));
  }).join();
  for (void* p : blocks) xalloc_free(p);
  xalloc_thread_collect();  // sends this thread's last, partly filled batch
  xalloc_stats_t after;
  xalloc_get_stats(&after);
  EXPECT_LE(after.in_use, before.in_use + kMiB)
      << "blocks freed into an exited thread's heap stayed in its inbox: in use " << before.in_use << " -> "
      << after.in_use;
  EXPECT_LE(after.committed, before.committed + 16 * kMiB)
      << "emptied slabs of an exited thread were kept: committed " << before.committed << " -> "
      << after.committed;
}

// Regression (tests/KNOWN_BUGS.md #10): a fork while another thread ran the start-up left the child waiting.
// Regression test (tests/KNOWN_BUGS.md #7): the fork handlers used to be
// registered only with the first thread heap. A process that had made only
// large allocations could fork while another thread held the span
// allocator's lock, and the child deadlocked on its first large allocation.
TEST(Churn, ForkBeforeTheFirstSmallAllocation) {
  if (xtest::kSanitized) GTEST_SKIP() << "fork with threads under a sanitizer";
  if (!xtest::rerun_in_fresh_process()) return;
  std::atomic<bool> stop{false};
  std::thread large_only([&] {
    while (!stop) xalloc_free(xalloc_malloc(200000));
  });
  int hung = 0;
  for (int i = 0; i < 40 && hung == 0; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(2);
      xalloc_free(xalloc_malloc(300000));
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) hung++;
  }
  stop = true;
  large_only.join();
  if (hung != 0) std::fprintf(stderr, "a child of fork() hung in its first large allocation\n");
  xtest::finish_fresh_process(hung == 0 ? 0 : 1);
}

// Regression test (tests/KNOWN_BUGS.md #20): malloc_trim and the
// statistics take the allocator's locks, and in a process whose first
// call they were, no fork handler was registered yet to release those
// locks in a child: a fork while another thread trimmed left the child's
// span allocator locked for good. Each now sets the process up first.
TEST(Churn, TrimOrStatisticsAsTheFirstCallSetTheProcessUp) {
  if (!xtest::in_fresh_process()) {
    for (const char* first : {"trim", "stats", "print"}) {
      auto r = xtest::run_test_in_fresh_process(xtest::current_test_name(), 60, {{"XTEST_FIRST", first}});
      EXPECT_TRUE(r.exited() && r.exit_code() == 0) << first << ": " << r.describe();
    }
    return;
  }
  if (xalloc::g_process_ready.load()) xtest::finish_fresh_process(3);  // the test would test nothing
  std::string first = std::getenv("XTEST_FIRST");
  xalloc_stats_t stats;
  if (first == "trim") xalloc_trim(0);
  else if (first == "stats") xalloc_get_stats(&stats);
  else xalloc_stats_print();
  xtest::finish_fresh_process(xalloc::g_process_ready.load() ? 0 : 1);
}

namespace {

// A pthread key whose destructor re-arms itself until glibc's last round
// (PTHREAD_DESTRUCTOR_ITERATIONS), where it allocates: after xalloc's own
// key destructor, with no round left to run it again.
pthread_key_t g_late_key;
std::atomic<void*> g_late_survivor{nullptr};

void late_destructor(void* arg) {
  auto round = reinterpret_cast<uintptr_t>(arg);
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(g_late_key, reinterpret_cast<void*>(round + 1));
    return;
  }
  void* kept = xalloc_malloc(48);
  for (size_t size : {size_t{16}, size_t{200}, size_t{3000}}) xalloc_free(xtest::launder_ptr(xalloc_malloc(size)));
  // One block outlives the thread, for another thread to free.
  void* previous = g_late_survivor.exchange(kept);
  xalloc_free(previous);
}

}  // namespace

// Regression test (tests/KNOWN_BUGS.md #19): a thread that allocated after
// its heap's teardown, in glibc's last round of key destructors, took a
// heap that nothing orphaned again: one heap (and its slabs) leaked per
// such thread.
TEST(Threads, AllocationInTheLastKeyDestructorRoundLeaksNoHeap) {
  // Sanitizer runtimes end a thread's own state from a key destructor in
  // that same last round (ThreadSanitizer's crashed in CI); instrumented
  // code running after it cannot work.
  if (xtest::kSanitized) GTEST_SKIP() << "a sanitizer's runtime ends the thread in the last destructor round";
  xalloc_free(xtest::launder_ptr(xalloc_malloc(16)));  // xalloc's key first: its destructor runs first
  ASSERT_EQ(pthread_key_create(&g_late_key, late_destructor), 0);
  auto exit_late = [] {
    std::thread t([] {
      xalloc_free(xtest::launder_ptr(xalloc_malloc(64)));
      pthread_setspecific(g_late_key, reinterpret_cast<void*>(1));
    });
    t.join();
  };
  exit_late();  // the shared heap of exiting threads, once
  xalloc_stats_t before;
  xalloc_get_stats(&before);
  for (int i = 0; i < 40; ++i) exit_late();
  xalloc_stats_t after;
  xalloc_get_stats(&after);
  EXPECT_LE(after.threads, before.threads + 1) << "heaps created for 40 threads that allocated while exiting";
  xalloc_free(g_late_survivor.exchange(nullptr));
  // Trim also settles the shared heap's current slabs; a later exiting
  // thread still allocates from it.
  xalloc_trim(0);
  exit_late();
  xalloc_free(g_late_survivor.exchange(nullptr));
  pthread_key_delete(g_late_key);
}
