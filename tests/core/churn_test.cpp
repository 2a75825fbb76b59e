// Thread churn: thousands of short-lived threads that allocate and free,
// some leaving blocks behind for later threads to free. Thread heaps are
// reused and memory stays bounded. Also thread-exit hooks (pthread key
// destructors, thread_local destructors) that allocate and free.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "core_test_util.h"
#include "test_util.h"
#include "xalloc/xalloc.h"

using xtest::kMiB;

namespace {

// Blocks left behind by exited threads, freed by later ones.
struct Leftovers {
  std::mutex mu;
  std::vector<std::pair<void*, uint64_t>> blocks;  // block, seed (size is in the first word)

  void put(void* p, uint64_t seed) {
    std::lock_guard<std::mutex> g(mu);
    blocks.emplace_back(p, seed);
  }
  bool take(std::pair<void*, uint64_t>* out) {
    std::lock_guard<std::mutex> g(mu);
    if (blocks.empty()) return false;
    *out = blocks.back();
    blocks.pop_back();
    return true;
  }
};

std::atomic<size_t> g_bad{0};

void* stamped(size_t size, uint64_t seed) {
  if (size < 16) size = 16;
  auto* p = static_cast<size_t*>(xalloc_malloc(size));
  if (p == nullptr) return nullptr;
  p[0] = size;
  xtest::fill_pattern(p + 1, (size - 8) < 64 ? size - 8 : 64, seed);
  return p;
}

bool stamp_ok(void* p, uint64_t seed) {
  auto* s = static_cast<size_t*>(p);
  size_t size = s[0];
  return xtest::check_pattern(s + 1, (size - 8) < 64 ? size - 8 : 64, seed) == SIZE_MAX;
}

// One short thread's work: allocate a few dozen blocks of mixed sizes,
// free most, leave a few for others, free a few left by others.
void churn_body(unsigned id, Leftovers& left) {
  xtest::Rng rng(id + 1);
  void* mine[48];
  uint64_t seeds[48];
  for (int i = 0; i < 48; ++i) {
    seeds[i] = (uint64_t{id} << 8) | static_cast<uint64_t>(i);
    mine[i] = stamped(rng.below(50) == 0 ? 70000 + rng.below(200000) : 16 + rng.below(2000), seeds[i]);
    if (mine[i] == nullptr) g_bad++;
  }
  for (int i = 0; i < 48; ++i) {
    if (mine[i] == nullptr) continue;
    if (!stamp_ok(mine[i], seeds[i])) g_bad++;
    if (i % 16 == 0) left.put(mine[i], seeds[i]);
    else xalloc_free(mine[i]);
  }
  std::pair<void*, uint64_t> other;
  for (int i = 0; i < 3 && left.take(&other); ++i) {
    if (!stamp_ok(other.first, other.second)) g_bad++;
    xalloc_free(other.first);
  }
}

void run_threads(size_t count, unsigned concurrency, unsigned first_id, Leftovers& left) {
  for (size_t done = 0; done < count;) {
    std::vector<std::thread> batch;
    for (unsigned i = 0; i < concurrency && done < count; ++i, ++done)
      batch.emplace_back(churn_body, first_id + static_cast<unsigned>(done), std::ref(left));
    for (auto& t : batch) t.join();
  }
}

void drain(Leftovers& left) {
  std::pair<void*, uint64_t> b;
  while (left.take(&b)) {
    if (!stamp_ok(b.first, b.second)) g_bad++;
    xalloc_free(b.first);
  }
}

}  // namespace

TEST(Churn, ThousandsOfThreadsWithBoundedMemory) {
  const unsigned kConcurrency = 8;
  Leftovers left;
  g_bad = 0;

  // Warm-up: what 100 threads leave behind.
  run_threads(100, kConcurrency, 0, left);
  drain(left);
  xalloc_trim(0);
  xalloc_stats_t warm;
  xalloc_get_stats(&warm);

  const size_t kMany = xtest::scaled(4000, 8);
  run_threads(kMany, kConcurrency, 1000, left);
  drain(left);
  xalloc_trim(0);
  xalloc_stats_t after;
  xalloc_get_stats(&after);

  EXPECT_EQ(g_bad.load(), 0u) << "blocks corrupted";
  EXPECT_LE(after.committed, warm.committed + 4 * kMiB)
      << "committed grew from " << warm.committed << " to " << after.committed << " over " << kMany << " threads";
  EXPECT_LE(after.mapped, warm.mapped + 4 * kMiB)
      << "mapped grew from " << warm.mapped << " to " << after.mapped << " over " << kMany << " threads";
  // Heaps of exited threads are reused: far fewer heaps than threads.
  EXPECT_LE(after.threads, warm.threads + 2 * kConcurrency)
      << after.threads << " thread heaps created for " << kMany + 100 << " threads, " << kConcurrency
      << " at a time";
}

TEST(Churn, ThreadsThatOnlyFreeOthersBlocks) {
  // Each thread frees blocks allocated by the previous (now exited) thread:
  // frees land in orphaned heaps and must still come back.
  const size_t kGenerations = xtest::scaled(600, 6);
  std::vector<void*> handoff;
  for (int i = 0; i < 200; ++i) handoff.push_back(xalloc_malloc(100));
  xalloc_stats_t warm{};
  for (size_t g = 0; g < kGenerations; ++g) {
    std::thread t([&handoff] {
      std::vector<void*> mine;
      for (int i = 0; i < 200; ++i) mine.push_back(xalloc_malloc(100 + static_cast<size_t>(i) * 8));
      for (void* p : handoff) xalloc_free(p);
      handoff.swap(mine);
    });
    t.join();
    if (g == 50) {
      xalloc_trim(0);
      xalloc_get_stats(&warm);
    }
  }
  for (void* p : handoff) xalloc_free(p);
  xalloc_trim(0);
  xalloc_stats_t after;
  xalloc_get_stats(&after);
  EXPECT_LE(after.committed, warm.committed + 4 * kMiB)
      << "blocks freed into exited threads' heaps were never reclaimed: committed " << warm.committed << " -> "
      << after.committed;
}

TEST(Churn, OrphansDrainedAndAdoptedConcurrently) {
  // Each round, six threads fill blocks and exit, leaving six orphans.
  // Then four threads free those blocks, every one of them into every
  // orphan at once (each orphan is drained by several threads), while four
  // new threads start and adopt orphans mid-drain. Nothing may be lost,
  // corrupted or handed out twice; ThreadSanitizer checks the orphans'
  // locks.
  constexpr unsigned kMakers = 6, kFreers = 4, kStarters = 4;
  g_bad = 0;
  const size_t kRounds = xtest::scaled(24, 4);
  constexpr size_t kPerMaker = 1500;
  xalloc_thread_collect();
  xalloc_trim(0);
  xalloc_stats_t before;
  xalloc_get_stats(&before);
  for (size_t round = 0; round < kRounds; ++round) {
    std::vector<std::vector<uint64_t*>> made(kMakers);
    std::vector<std::thread> makers;
    for (unsigned m = 0; m < kMakers; ++m)
      makers.emplace_back([&made, m, round] {
        for (size_t i = 0; i < kPerMaker; ++i) {
          size_t words = 2 + (i * 7 + m) % 60;
          auto* p = static_cast<uint64_t*>(xalloc_malloc(words * sizeof(uint64_t)));
          p[0] = words;
          for (size_t w = 1; w < words; ++w) p[w] = round * 1000003 + m * 7919 + i + w;
          made[m].push_back(p);
        }
      });
    for (std::thread& t : makers) t.join();

    std::atomic<unsigned> ready{0};
    auto wait_all = [&ready] {
      ready.fetch_add(1);
      while (ready.load() < kFreers + kStarters) std::this_thread::yield();
    };
    std::vector<std::thread> threads;
    for (unsigned f = 0; f < kFreers; ++f)
      threads.emplace_back([&made, &wait_all, f, round] {
        wait_all();
        // Block i of every maker, for i = f, f + kFreers, ...: all four
        // freers send to all six orphans throughout.
        for (size_t i = f; i < kPerMaker; i += kFreers)
          for (unsigned m = 0; m < kMakers; ++m) {
            uint64_t* p = made[m][i];
            for (size_t w = 1; w < p[0]; ++w)
              if (p[w] != round * 1000003 + m * 7919 + i + w) g_bad++;
            xalloc_free(p);
          }
      });
    for (unsigned s = 0; s < kStarters; ++s)
      threads.emplace_back([&wait_all] {
        wait_all();
        std::vector<void*> mine;
        for (int i = 0; i < 300; ++i) {
          auto* p = static_cast<uint64_t*>(xalloc_malloc(8 + static_cast<size_t>(i % 40) * 8));
          *p = 0x5eed;
          mine.push_back(p);
        }
        for (void* p : mine) {
          if (*static_cast<uint64_t*>(p) != 0x5eed) g_bad++;
          xalloc_free(p);
        }
      });
    for (std::thread& t : threads) t.join();
  }
  xalloc_thread_collect();
  xalloc_trim(0);
  xalloc_stats_t after;
  xalloc_get_stats(&after);
  EXPECT_EQ(g_bad.load(), 0u) << "a block was corrupted or handed out twice";
  EXPECT_LE(after.in_use, before.in_use + kMiB)
      << "blocks freed into orphans were lost or stranded: in use " << before.in_use << " -> " << after.in_use;
}

namespace {

pthread_key_t g_keys[3];
std::atomic<size_t> g_destructor_runs{0};

// Destructors that free their value and allocate and free more. The first
// key's destructor also sets its key again once, so that destructors run a
// second round (after the allocator's own key destructor has run).
void key_destructor_body(void* value) {
  auto* v = static_cast<uint64_t*>(value);
  if (v[0] != 0xfeedface) g_bad++;
  xalloc_free(v);
  void* scratch[16];
  for (int i = 0; i < 16; ++i) scratch[i] = xalloc_malloc(32 + static_cast<size_t>(i) * 100);
  for (void* p : scratch) xalloc_free(p);
  g_destructor_runs++;
}

void key_destructor(void* value) { key_destructor_body(value); }

void key_destructor_rearm(void* value) {
  uint64_t round = static_cast<uint64_t*>(value)[1];
  key_destructor_body(value);
  if (round == 0) {
    auto* again = static_cast<uint64_t*>(xalloc_malloc(2 * sizeof(uint64_t)));
    again[0] = 0xfeedface;
    again[1] = 1;
    pthread_setspecific(g_keys[0], again);
  }
}

struct ThreadLocalOwner {
  void* block = nullptr;
  ~ThreadLocalOwner() {
    // Runs at thread exit, before the key destructors.
    xalloc_free(block);
    void* p = xalloc_malloc(500);
    xalloc_free(p);
  }
};

thread_local ThreadLocalOwner t_owner;

}  // namespace

TEST(Churn, KeyDestructorsAllocateAndFreeAtThreadExit) {
  // Keys created before and after the allocator's own (which is created on
  // the first allocation of the process).
  ASSERT_EQ(pthread_key_create(&g_keys[0], key_destructor_rearm), 0);
  void* first = xalloc_malloc(8);
  xalloc_free(first);
  ASSERT_EQ(pthread_key_create(&g_keys[1], key_destructor), 0);
  ASSERT_EQ(pthread_key_create(&g_keys[2], key_destructor), 0);
  g_bad = 0;
  g_destructor_runs = 0;
  const size_t kThreads = xtest::scaled(1000, 5);
  xalloc_stats_t warm{};
  for (size_t done = 0; done < kThreads;) {
    std::vector<std::thread> batch;
    for (int i = 0; i < 4; ++i, ++done) {
      batch.emplace_back([] {
        t_owner.block = xalloc_malloc(300);
        for (pthread_key_t k : g_keys) {
          auto* v = static_cast<uint64_t*>(xalloc_malloc(2 * sizeof(uint64_t)));
          v[0] = 0xfeedface;
          v[1] = 0;
          pthread_setspecific(k, v);
        }
        void* p = xalloc_malloc(1000);
        xalloc_free(p);
      });
    }
    for (auto& t : batch) t.join();
    if (done == 100) {
      xalloc_trim(0);
      xalloc_get_stats(&warm);
    }
  }
  xalloc_trim(0);
  xalloc_stats_t after;
  xalloc_get_stats(&after);
  EXPECT_EQ(g_bad.load(), 0u);
  EXPECT_EQ(g_destructor_runs.load(), kThreads * 4) << "each thread runs 3 destructors plus one second round";
  EXPECT_LE(after.committed, warm.committed + 4 * kMiB) << "memory grows with threads whose destructors allocate";
  EXPECT_LE(after.threads, warm.threads + 8) << "thread heaps not reused after exit hooks allocated";
  for (pthread_key_t k : g_keys) pthread_key_delete(k);
}

TEST(Churn, ThreadCollectHandsMemoryBack) {
  // xalloc_thread_collect in a long-lived thread returns its empty slabs.
  std::thread t([] {
    std::vector<void*> blocks;
    for (int i = 0; i < 20000; ++i) blocks.push_back(xalloc_malloc(16 + static_cast<size_t>(i % 60) * 16));
    for (void* p : blocks) xalloc_free(p);
    xalloc_stats_t before, after;
    xalloc_get_stats(&before);
    xalloc_thread_collect();
    xalloc_get_stats(&after);
    EXPECT_LE(after.in_use, before.in_use);
    // The thread keeps working after collecting.
    void* p = xalloc_malloc(100);
    EXPECT_NE(p, nullptr);
    xalloc_free(p);
  });
  t.join();
}

// A fork while another thread purges free spans outside the span
// allocator's lock: in the child, that thread does not exist, and its
// spans are purged and freed by the fork handler. The child's zeroed large
// blocks read as zero, and it neither hangs nor trips over the spans.
TEST(Churn, ForkWhileSpansArePurged) {
  if (xtest::kSanitized) GTEST_SKIP() << "fork with threads under a sanitizer";
  if (!xtest::rerun_in_fresh_process()) return;
  std::atomic<bool> stop{false};
  std::thread purger([&] {
    while (!stop) xalloc_trim(0);
  });
  std::thread spans([&] {
    // Past the spans a heap keeps: freed straight to the span allocator.
    while (!stop) {
      void* p = xalloc_malloc(size_t{3} << 20);
      if (p != nullptr) std::memset(p, 1, size_t{3} << 20);
      xalloc_free(p);
    }
  });
  int failed = 0;
  for (int i = 0; i < 40 && failed == 0; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(5);
      int bad = 0;
      for (int round = 0; round < 4; ++round) {
        size_t size = (size_t{3} << 20) + static_cast<size_t>(round) * 65536;
        auto* p = static_cast<unsigned char*>(xalloc_calloc(1, size));
        if (p == nullptr) _exit(3);
        for (size_t at = 0; at < size; at += 4096) bad |= p[at];
        std::memset(p, 2, size);
        xalloc_free(p);
        xalloc_trim(0);
      }
      _exit(bad != 0 ? 2 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::fprintf(stderr, "child %d: status %#x\n", i, status);
      failed++;
    }
  }
  stop = true;
  purger.join();
  spans.join();
  xtest::finish_fresh_process(failed == 0 ? 0 : 1);
}
