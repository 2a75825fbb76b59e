// Helpers shared by the core tests of xalloc's components (trim, purge,
// statistics, kept spans, slab pool, heap, remote free, borrow, thread
// registry): sizes, the statistics, a few huge blocks, and a thread that runs
// the test's steps on request. Test files bring the names they use in with
// using-declarations.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
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

// A thread that stays alive, doing nothing (an owner whose heap is neither
// torn down nor draining), until the test hands it a step: run(fn) runs fn
// on that thread and returns when it is done. The thread exits when the
// object goes (or at finish()). Its std::function and the queue come from
// the system allocator, not xalloc.
class StepThread {
 public:
  StepThread() : thread_([this] { loop(); }) {}
  ~StepThread() { finish(); }
  StepThread(const StepThread&) = delete;
  StepThread& operator=(const StepThread&) = delete;

  void run(std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    step_ = std::move(fn);
    has_step_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !has_step_; });
  }

  // Ends the thread (its heap becomes an orphan); idempotent.
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_) return;
      done_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return has_step_ || done_; });
      if (has_step_) {
        std::function<void()> step = std::move(step_);
        lock.unlock();
        step();
        lock.lock();
        has_step_ = false;
        cv_.notify_all();
        continue;
      }
      return;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> step_;
  bool has_step_ = false;
  bool done_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace xtest
