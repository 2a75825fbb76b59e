// A small futex mutex for the allocator's slow paths.
//
// Three states (Drepper, "Futexes are tricky"): 0 unlocked, 1 locked,
// 2 locked with waiters. Uncontended lock/unlock is one atomic each; the
// acquire/release orderings are what ThreadSanitizer reasons with, so the
// futex system calls only put threads to sleep.
//
// Each lock names its site: the counting build (shared_count.h) counts the
// acquisitions of locks that more than one thread has taken.
#pragma once

#include <atomic>
#include <cstdint>

#include "platform/os.h"
#include "platform/shared_count.h"

namespace xalloc {

class Mutex {
 public:
  constexpr explicit Mutex([[maybe_unused]] shared_count::Site site)
#if defined(XALLOC_COUNT_SHARED)
      : site_(site)
#endif
  {
  }
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() {
    uint32_t expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed))
      lock_contended();
    acquired();
  }

  bool try_lock() {
    uint32_t expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed))
      return false;
    acquired();
    return true;
  }

  void unlock() {
    if (state_.exchange(0, std::memory_order_release) == 2) os::futex_wake_one(raw());
  }

  // After fork() only the forking thread exists in the child: whoever held
  // the lock in the parent is gone, so the child starts it afresh.
  // (Written only when held: a page not written is not copied.)
  void reset_after_fork() {
    if (state_.load(std::memory_order_relaxed) != 0) state_.store(0, std::memory_order_relaxed);
  }

 private:
  void lock_contended() {
    for (int spin = 0; spin < 64; ++spin) {
      uint32_t expected = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(expected, 1, std::memory_order_acquire, std::memory_order_relaxed))
        return;
      __builtin_ia32_pause();
    }
    while (state_.exchange(2, std::memory_order_acquire) != 0) os::futex_wait(raw(), 2);
  }

  void acquired() {
#if defined(XALLOC_COUNT_SHARED)
    shared_count::acquired(site_, owners_);
#endif
  }

  const volatile uint32_t* raw() const { return reinterpret_cast<const volatile uint32_t*>(&state_); }

  std::atomic<uint32_t> state_{0};
#if defined(XALLOC_COUNT_SHARED)
  shared_count::Site site_;
  shared_count::LockOwners owners_;
#endif
};

class LockGuard {
 public:
  explicit LockGuard(Mutex& m) : m_(m) { m_.lock(); }
  ~LockGuard() { m_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& m_;
};

}  // namespace xalloc
