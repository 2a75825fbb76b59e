#include "support/emergency_heap.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "support/hooks.h"
#include "platform/os.h"

namespace xalloc::emergency {

namespace {

constexpr size_t kBufferBytes = 1 << 20;
// (Not page-aligned: that would align all of .bss, and put the first
// variable of .bss, which the C runtime reads and then writes at exit, on
// a page of its own - two page faults in every process.)
alignas(64) char g_buffer[kBufferBytes];
// The whole pages of the buffer that init() made read-only (none: empty),
// and whether enter() could not make them writable again (then the report
// allocates nothing and prints what it can).
os::PageRange g_sealed;
std::atomic<bool> g_unusable{false};
std::atomic<size_t> g_used{0};
std::atomic<uint32_t> g_reporting{0};
__thread bool t_active = false;

// Two threads that find misuse at once would interleave their reports and
// share the symbolizer's tables: the first to come reports and aborts the
// process, and the others wait for that. Not forever: should the first be
// stuck (on a lock that a waiting thread holds), a waiting thread goes on
// to report after a while.
constexpr uint64_t kReporterWaitMs = 2000;

void wait_for_turn_to_report() {
  if (g_reporting.exchange(1, std::memory_order_acq_rel) == 0) return;
  uint64_t start = os::monotonic_ms();
  while (os::monotonic_ms() - start < kReporterWaitMs) os::yield_cpu();
}

void unseal_buffer() {
  if (g_sealed.end == 0) return;
  // Idempotent: a second reporting thread asks again.
  if (!os::commit(reinterpret_cast<void*>(g_sealed.begin), g_sealed.end - g_sealed.begin))
    g_unusable.store(true, std::memory_order_relaxed);
}

}  // namespace

void init(bool commit_on_demand) {
  if (commit_on_demand) g_sealed = os::remap_read_only_zeros(g_buffer, kBufferBytes);
}

void enter() {
  if (t_active) return;
  wait_for_turn_to_report();
  unseal_buffer();
  t_active = true;
  // All allocations of this thread reach the slow paths, which check
  // active().
  if (g_hooks.leave_thread_heap != nullptr) g_hooks.leave_thread_heap();
}

bool active() { return t_active; }

bool owns(const void* ptr) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  auto base = reinterpret_cast<uintptr_t>(g_buffer);
  return p >= base && p < base + kBufferBytes;
}

void* alloc(size_t size, size_t alignment) {
  if (alignment < 16) alignment = 16;
  // Each block is preceded by its size, for realloc. Aligned as an
  // address: the buffer itself is only 64-byte aligned.
  // A bump by compare-and-swap: a thread that reports after waiting in
  // vain may share the buffer with the first.
  if (g_unusable.load(std::memory_order_relaxed)) {
    errno = ENOMEM;
    return nullptr;
  }
  auto base = reinterpret_cast<uintptr_t>(g_buffer);
  size_t used = g_used.load(std::memory_order_relaxed);
  size_t start;
  do {
    start = ((base + used + sizeof(size_t) + alignment - 1) & ~(alignment - 1)) - base;
    if (start + size > kBufferBytes || start + size < start) {
      errno = ENOMEM;
      return nullptr;
    }
  } while (!g_used.compare_exchange_weak(used, start + size, std::memory_order_relaxed));
  memcpy(g_buffer + start - sizeof(size_t), &size, sizeof(size_t));
  return g_buffer + start;
}

void* realloc(void* ptr, size_t size) {
  void* fresh = alloc(size, 16);
  if (fresh != nullptr && ptr != nullptr) {
    size_t old_size;
    memcpy(&old_size, static_cast<char*>(ptr) - sizeof(size_t), sizeof(size_t));
    memcpy(fresh, ptr, old_size < size ? old_size : size);
  }
  return fresh;
}

}  // namespace xalloc::emergency
