#include "frontend/purger.h"

#include <atomic>

#include "backend/span_allocator.h"
#include "frontend/heap_upkeep.h"
#include "platform/os.h"

namespace xalloc {

namespace {

// Set by the first thread to start it: a second does not, nor does a
// failed start try again on every slow path.
XALLOC_FORK_DATA std::atomic<bool> g_purger_started{false};

// The clock's period: a tenth of the delay (the excess beyond the budget
// waits that long), at least 5 ms.
uint64_t purger_period_ms() { return g_options.purge_delay_ms / 10 > 5 ? g_options.purge_delay_ms / 10 : 5; }

void* purger_main(void*) {
  for (;;) {
    os::sleep_ms(purger_period_ms());
    uint64_t now = os::monotonic_ms();
    g_spans.collapse_deferred(now);
    purge_idle_memory(now);
  }
  return nullptr;
}

}  // namespace

void purger_start() {
  if (g_options.background_purge == Switch::kOff || g_purger_started.exchange(true)) return;
  if (os::start_thread(purger_main, "xalloc-purge")) g_purge_clock.store(true, std::memory_order_relaxed);
}

void purger_after_fork_child() {
  if (g_purger_started.load(std::memory_order_relaxed)) {
    g_purge_clock.store(false, std::memory_order_relaxed);
    g_purger_started.store(false, std::memory_order_relaxed);
  }
  if (g_options.background_purge == Switch::kOn) purger_start();
}

}  // namespace xalloc
