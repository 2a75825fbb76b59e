// Cross-thread use: blocks allocated by one thread and freed by another
// (producer/consumer), objects migrating around a ring of threads with
// realloc on the way, all-to-all exchange, concurrent large/huge traffic.
// Every object carries a checksummed pattern verified by whoever frees it.
#include <gtest/gtest.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {

// An object's header: its size and seed, then the pattern.
struct Header {
  size_t size;
  uint64_t seed;
};

void* make_object(size_t size, uint64_t seed) {
  if (size < sizeof(Header)) size = sizeof(Header);
  auto* h = static_cast<Header*>(xalloc_malloc(size));
  if (h == nullptr) return nullptr;
  h->size = size;
  h->seed = seed;
  size_t body = size - sizeof(Header);
  xtest::fill_pattern(h + 1, body < 256 ? body : 256, seed);
  if (body > 256) static_cast<uint8_t*>(static_cast<void*>(h + 1))[body - 1] = static_cast<uint8_t>(seed);
  return h;
}

bool object_ok(const void* p) {
  const auto* h = static_cast<const Header*>(p);
  size_t body = h->size - sizeof(Header);
  if (xtest::check_pattern(h + 1, body < 256 ? body : 256, h->seed) != SIZE_MAX) return false;
  if (body > 256 && static_cast<const uint8_t*>(static_cast<const void*>(h + 1))[body - 1] != static_cast<uint8_t>(h->seed))
    return false;
  return xalloc_usable_size(p) >= h->size;
}

// A blocking multi-producer multi-consumer queue (std containers use the
// system allocator here; only the objects come from xalloc).
class Queue {
 public:
  void push(void* p) {
    {
      std::lock_guard<std::mutex> g(mu_);
      items_.push_back(p);
    }
    cv_.notify_one();
  }
  // nullptr once closed and empty.
  void* pop() {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return nullptr;
    void* p = items_.front();
    items_.pop_front();
    return p;
  }
  void close() {
    {
      std::lock_guard<std::mutex> g(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<void*> items_;
  bool closed_ = false;
};

void producer_consumer(unsigned producers, unsigned consumers, size_t per_producer) {
  Queue q;
  std::atomic<size_t> consumed{0}, bad{0};
  std::vector<std::thread> threads;
  for (unsigned c = 0; c < consumers; ++c) {
    threads.emplace_back([&] {
      while (void* p = q.pop()) {
        if (!object_ok(p)) bad++;
        xalloc_free(p);
        consumed++;
      }
    });
  }
  std::vector<std::thread> prod;
  for (unsigned t = 0; t < producers; ++t) {
    prod.emplace_back([&, t] {
      xtest::Rng rng(t + 1);
      for (size_t i = 0; i < per_producer; ++i) {
        void* p = make_object(rng.size_mix(), t * 1000003 + i);
        if (p == nullptr) {
          bad++;
          continue;
        }
        q.push(p);
      }
    });
  }
  for (auto& t : prod) t.join();
  q.close();
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0u) << "objects corrupted in transit";
  EXPECT_EQ(consumed.load(), producers * per_producer);
}

}  // namespace

TEST(Threads, ProducerConsumer8) { producer_consumer(4, 4, xtest::scaled(20000)); }

TEST(Threads, ProducerConsumer32) { producer_consumer(16, 16, xtest::scaled(3000)); }

TEST(Threads, OneProducerManyConsumers) { producer_consumer(1, 15, xtest::scaled(40000)); }

TEST(Threads, ManyProducersOneConsumer) { producer_consumer(15, 1, xtest::scaled(3000)); }

TEST(Threads, ObjectsMigrateAroundARing) {
  // Each thread takes objects from its inbox, checks them, sometimes
  // reallocs them (a block owned by another thread), and passes them on.
  // After a fixed number of hops an object is freed by whoever holds it.
  const unsigned kThreads = 12;
  const size_t kObjects = xtest::scaled(3000);
  const unsigned kHops = 25;
  std::vector<Queue> rings(kThreads);
  std::atomic<size_t> finished{0}, bad{0};
  // The hop counter lives in the top bits of each object's seed.
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      xtest::Rng rng(t + 77);
      while (void* p = rings[t].pop()) {
        auto lose = [&] {
          bad++;
          if (++finished == kObjects) {
            for (auto& r : rings) r.close();
          }
        };
        if (!object_ok(p)) {
          lose();
          continue;
        }
        auto* h = static_cast<Header*>(p);
        unsigned hops = static_cast<unsigned>(h->seed >> 48);
        if (hops + 1 >= kHops) {
          xalloc_free(p);
          if (++finished == kObjects) {
            for (auto& r : rings) r.close();
          }
          continue;
        }
        uint64_t next_seed = (uint64_t{hops + 1} << 48) | (h->seed & 0xffffffffffffull);
        void* q;
        if (rng.below(3) == 0) {
          // realloc a block another thread allocated, then re-stamp it.
          size_t new_size = rng.size_mix() + sizeof(Header);
          uint64_t old_seed = h->seed;
          size_t old_size = h->size;
          q = xalloc_realloc(p, new_size);
          if (q == nullptr) {
            lose();
            continue;
          }
          auto* nh = static_cast<Header*>(q);
          size_t kept = (old_size < new_size ? old_size : new_size) - sizeof(Header);
          if (xtest::check_pattern(nh + 1, kept < 256 ? kept : 256, old_seed) != SIZE_MAX) bad++;
          xalloc_free(q);
          q = make_object(new_size, next_seed);
        } else {
          // Replace it by a fresh object; the old one dies here (remote free).
          q = make_object(h->size, next_seed);
          xalloc_free(p);
        }
        if (q == nullptr) {
          lose();
          continue;
        }
        rings[(t + 1) % kThreads].push(q);
      }
    });
  }
  xtest::Rng rng(5);
  for (size_t i = 0; i < kObjects; ++i) rings[i % kThreads].push(make_object(rng.size_mix(), i & 0xffffffff));
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(finished.load(), kObjects);
}

TEST(Threads, AllToAllExchange) {
  // Slots shared by all threads: each thread swaps its new object into a
  // random slot and frees what it took out (usually another thread's).
  const unsigned kThreads = 16;
  const size_t kOps = xtest::scaled(20000);
  std::vector<std::atomic<void*>> slots(1024);
  for (auto& s : slots) s.store(nullptr);
  std::atomic<size_t> bad{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      xtest::Rng rng(t * 31 + 1);
      for (size_t i = 0; i < kOps; ++i) {
        void* mine = make_object(rng.below(10) == 0 ? rng.size_mix() : 16 + rng.below(200), (uint64_t{t} << 32) | i);
        void* old = slots[rng.below(slots.size())].exchange(mine, std::memory_order_acq_rel);
        if (old != nullptr) {
          if (!object_ok(old)) bad++;
          xalloc_free(old);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : slots) {
    void* p = s.load();
    if (p != nullptr) {
      EXPECT_TRUE(object_ok(p));
      xalloc_free(p);
    }
  }
  EXPECT_EQ(bad.load(), 0u);
}

void concurrent_large_and_huge_blocks() {
  const unsigned kThreads = 8;
  const size_t kOps = xtest::scaled(300);
  std::atomic<size_t> bad{0};
  std::vector<std::atomic<void*>> slots(32);
  for (auto& s : slots) s.store(nullptr);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      xtest::Rng rng(t + 100);
      for (size_t i = 0; i < kOps; ++i) {
        size_t size = rng.below(8) == 0 ? (size_t{16} << 20) + rng.below(size_t{8} << 20)
                                        : 65537 + rng.below(size_t{4} << 20);
        void* p = xalloc_malloc(size);
        if (p == nullptr) {
          bad++;
          continue;
        }
        auto* h = static_cast<Header*>(p);
        h->size = size;
        h->seed = (uint64_t{t} << 32) | i;
        auto* b = static_cast<uint8_t*>(p);
        b[size - 1] = static_cast<uint8_t>(h->seed);
        b[size / 2] = static_cast<uint8_t>(h->seed >> 3);
        if (rng.below(4) == 0) {
          // Grow or shrink it while others allocate around it.
          size_t next = size / 2 + rng.below(size);
          void* q = xalloc_realloc(p, next);
          if (q == nullptr) {
            bad++;
            continue;
          }
          h = static_cast<Header*>(q);
          b = static_cast<uint8_t*>(q);
          if (h->seed != ((uint64_t{t} << 32) | i) || (next > size / 2 && b[size / 2] != static_cast<uint8_t>(h->seed >> 3)))
            bad++;
          h->size = next;
          b[next - 1] = static_cast<uint8_t>(h->seed);
          b[next / 2] = static_cast<uint8_t>(h->seed >> 3);
          p = q;
        }
        void* old = slots[rng.below(slots.size())].exchange(p, std::memory_order_acq_rel);
        if (old != nullptr) {
          auto* oh = static_cast<Header*>(old);
          auto* ob = static_cast<uint8_t*>(old);
          if (ob[oh->size - 1] != static_cast<uint8_t>(oh->seed) || ob[oh->size / 2] != static_cast<uint8_t>(oh->seed >> 3))
            bad++;
          xalloc_free(old);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : slots) xalloc_free(s.load());
  EXPECT_EQ(bad.load(), 0u);
}

// Regression test (tests/KNOWN_BUGS.md #9): under ThreadSanitizer, a huge
// mapping unmapped by one thread and mapped again by another used to look
// like a race (the mappings were made with raw system calls it cannot see).
TEST(Threads, ConcurrentLargeAndHugeBlocks) {
  for (int i = 0; i < (xtest::kThreadSanitizer ? 4 : 1); ++i) concurrent_large_and_huge_blocks();
}

// Free spans are purged outside the span allocator's lock while other
// threads take and give back spans around them: no span is handed out
// while it is being purged (a zeroed block would then read what was
// written before, or lose what is written now), and every span comes back.
// One thread trims over and over, which purges every free span.
TEST(Threads, SpansPurgedWhileOthersAllocateAroundThem) {
  constexpr unsigned kThreads = 3;
  const size_t kRounds = xtest::scaled(100);
  std::atomic<size_t> bad{0};
  std::atomic<bool> done{false};
  std::thread trimmer([&] {
    while (!done.load()) {
      xalloc_trim(0);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      xtest::Rng rng(t + 7);
      for (size_t i = 0; i < kRounds; ++i) {
        // Past the spans a heap keeps (2 MiB): straight to the span allocator.
        size_t size = (size_t{2} << 20) + 4096 + rng.below(size_t{4} << 20);
        auto* p = static_cast<uint8_t*>(xalloc_calloc(1, size));
        if (p == nullptr) {
          bad++;
          continue;
        }
        if (p[size - 1] != 0) bad++;
        for (size_t at = 0; at < size; at += 4096) {
          if (p[at] != 0) bad++;
          p[at] = static_cast<uint8_t>(i | 1);
        }
        std::this_thread::yield();  // (a trim may run meanwhile)
        for (size_t at = 0; at < size; at += 4096) {
          if (p[at] != static_cast<uint8_t>(i | 1)) bad++;
        }
        xalloc_free(p);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  done.store(true);
  trimmer.join();
  EXPECT_EQ(bad.load(), 0u);
}

// Large blocks handed around a ring of threads: each is freed by the next
// thread, so its span goes back to the thread that allocated it, while the
// periodic reclaim pass (every 10 ms with XALLOC_PURGE_DELAY_MS=1) and
// malloc_trim take the spans of threads that pause. The block's pattern is
// checked by whoever frees it. Returns the number of bad blocks.
size_t large_blocks_handed_around_pausing_threads(unsigned threads, size_t per_thread) {
  std::vector<std::mutex> locks(threads);
  std::vector<std::vector<void*>> mailboxes(threads);
  std::atomic<size_t> bad{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      xtest::Rng rng(t + 7);
      for (size_t i = 0; i < per_thread; ++i) {
        void* p = make_object(65537 + rng.below(size_t{7} << 16), (uint64_t{t} << 32) | i);
        if (p == nullptr) {
          bad++;
          continue;
        }
        {
          std::lock_guard<std::mutex> guard(locks[(t + 1) % threads]);
          mailboxes[(t + 1) % threads].push_back(p);
        }
        std::vector<void*> received;
        {
          std::lock_guard<std::mutex> guard(locks[t]);
          received.swap(mailboxes[t]);
        }
        for (void* q : received) {
          if (!object_ok(q)) bad++;
          xalloc_free(q);
        }
        for (int k = 0; k < 32; ++k) xalloc_free(xalloc_malloc(64 + rng.below(900)));  // slow paths now and then
        if (rng.below(32) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng.below(25)));
        if (rng.below(256) == 0) xalloc_trim(0);
      }
    });
  }
  for (auto& w : workers) w.join();
  for (auto& box : mailboxes)
    for (void* q : box) {
      if (!object_ok(q)) bad++;
      xalloc_free(q);
    }
  return bad.load();
}

TEST(Threads, LargeBlocksHandedAroundWhileTheirSpansAreReclaimed) {
  if (xtest::in_fresh_process())
    xtest::finish_fresh_process(large_blocks_handed_around_pausing_threads(4, xtest::scaled(2000)) == 0 ? 0 : 1);
  auto r = xtest::run_test_in_fresh_process(xtest::current_test_name(), 120, {{"XALLOC_PURGE_DELAY_MS", "1"}});
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

// Threads that fill slabs of a few classes and empty them again, so that
// their emptied slabs become spares and the next batch takes them back,
// while the reclaim pass (every 10 ms with XALLOC_PURGE_DELAY_MS=1) and
// malloc_trim take the spares of threads that pause. Each batch is
// checked before it is freed. Returns the number of bad blocks.
size_t slab_batches_while_spares_are_reclaimed(unsigned threads, size_t batches) {
  std::atomic<size_t> bad{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      xtest::Rng rng(t + 11);
      std::vector<void*> batch;
      for (size_t b = 0; b < batches; ++b) {
        size_t size = 16 * (1 + rng.below(12));
        size_t count = (size_t{3} << 16) / size;  // about three slabs
        for (size_t i = 0; i < count; ++i) {
          void* p = make_object(size, (uint64_t{t} << 40) | (uint64_t{b} << 20) | i);
          if (p == nullptr) bad++;
          else batch.push_back(p);
        }
        for (void* p : batch) {
          if (!object_ok(p)) bad++;
          xalloc_free(p);
        }
        batch.clear();
        if (rng.below(8) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng.below(25)));
        if (rng.below(64) == 0) xalloc_trim(0);
      }
    });
  }
  for (auto& w : workers) w.join();
  return bad.load();
}

TEST(Threads, SlabBatchesWhileTheirSparesAreReclaimed) {
  if (xtest::in_fresh_process())
    xtest::finish_fresh_process(slab_batches_while_spares_are_reclaimed(4, xtest::scaled(300, 6)) == 0 ? 0 : 1);
  auto r = xtest::run_test_in_fresh_process(xtest::current_test_name(), 120, {{"XALLOC_PURGE_DELAY_MS", "1"}});
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
}

TEST(Threads, ConcurrentFirstAllocation) {
  // Many threads whose very first allocation happens at the same moment.
  const unsigned kThreads = 32;
  std::atomic<bool> go{false};
  std::atomic<size_t> bad{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (int i = 0; i < 200; ++i) {
        void* p = make_object(16 + (t * 7 + static_cast<unsigned>(i)) % 3000, t);
        if (p == nullptr || !object_ok(p)) bad++;
        xalloc_free(p);
      }
    });
  }
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0u);
}

// Regression test (tests/KNOWN_BUGS.md #8, seen by ThreadSanitizer): the
// first allocations of a process, made by several threads at once and above
// 1 KiB, used to read a profiler flag that another thread's process_init
// wrote. Fresh process, so that the allocator is not initialised yet.
TEST(Threads, ConcurrentFirstAllocationsOfMediumBlocks) {
  if (!xtest::in_fresh_process()) {
    auto r = xtest::run_test_in_fresh_process(xtest::current_test_name(), 120);
    EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
    return;
  }
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&go, t] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (int i = 0; i < 50; ++i) xalloc_free(xtest::launder_ptr(xalloc_malloc(2000 + static_cast<size_t>(t * 100 + i))));
    });
  }
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  xtest::finish_fresh_process(0);
}
