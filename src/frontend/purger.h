// The purger: a thread that runs the purge on its own clock
// (XALLOC_BACKGROUND_PURGE). With it, freed memory waits for its delay
// whether or not the program calls the allocator again, so no free has to
// purge at once (purge_policy.h). Auto, the default, starts it once the
// process has kPurgerThreshold bytes in use: a small program never has the
// thread, and a big heap, whose bursts of frees are worth keeping for a
// rebuild, has its clock. Not under a commit limit (commit on demand):
// there, memory held for reuse stays charged, and what a burst frees is
// better uncharged at once, for whatever the program asks next.
#pragma once

#include <cstddef>

#include "backend/purge_policy.h"
#include "base/macros.h"
#include "frontend/heap.h"
#include "support/counters.h"
#include "support/options.h"

namespace xalloc {

inline constexpr size_t kPurgerThreshold = size_t{64} << 20;

// Starts the thread unless it runs (or failed to start).
void purger_start();

// The fork child has no purger: started again as the parent's was (at once
// when the option says 1; auto: at the next slow path that finds it due).
void purger_after_fork_child();

// Called on allocation slow paths, where the thread holds no lock and its
// heap is consistent: pthread_create allocates, and comes back into malloc. (Not for a thread past its heap's teardown, whose
// allocations run under the registry lock.)
XALLOC_INLINE void purger_start_if_due() {
  if (XALLOC_UNLIKELY(g_options.background_purge == Switch::kAuto && !g_purge_clock.load(std::memory_order_relaxed) &&
                      stats::in_use_bytes() >= kPurgerThreshold && !g_options.commit_on_demand &&
                      t_heap != &g_empty_heap))
    purger_start();
}

}  // namespace xalloc
