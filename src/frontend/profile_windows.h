// The profiler's windows (Heap::windows, ProfileWindows): runs of a small
// class's blocks that end before its next sampled byte, served by the fast
// path while the profiler samples without statistics.
#pragma once

#include "frontend/heap.h"

namespace xalloc {

// Takes the longest run of the current slab's free blocks that ends before
// the class's next sampled byte into the class's window.
void window_open(Heap* heap, unsigned cls);
// Counts the bytes popped from the window of `cls` since it was last
// counted towards the class's next sample.
void window_count_pops(Heap* heap, unsigned cls);
// Returns the blocks left in the heap's windows to their slabs.
void windows_close(Heap* heap);

}  // namespace xalloc
