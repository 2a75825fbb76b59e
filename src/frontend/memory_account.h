// Where resident memory goes (support/counters.h, MemoryAccount): a walk
// of every span, whose resident pages the kernel reports (mincore), and of
// every heap. Holds the span allocator's lock for the walk, and reads the
// counts of other threads' slabs as the statistics do (an estimate while
// they run). A slow call - a system call per span - for the statistics only.
#pragma once

#include "support/counters.h"

namespace xalloc {

void take_memory_account(stats::MemoryAccount* out);

}  // namespace xalloc
