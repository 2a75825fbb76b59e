// Stack traces: the heap profiler's through xalloc's own walker
// (frame_walker.h), with libunwind for the stacks it cannot follow; a
// misuse report's through libunwind, which also names the frames.
//
// libunwind is loaded with dlopen the first time a trace is needed (a
// misuse report, or start-up with the heap profiler on), never at program
// start: linking it would load two more libraries into every process that
// preloads xalloc, which costs more than xalloc's whole start-up.
#pragma once

#include <cstddef>

namespace xalloc {

// Loads libunwind; false if it is not installed.
bool stack_trace_load();

// Return addresses of the calling thread's frames, innermost first,
// skipping `skip` frames of the caller's own. Returns how many were stored.
int stack_trace_capture(void** out, int max, int skip);

// Prints the calling thread's stack to stderr, one frame a line, starting
// at the first frame outside xalloc.
void stack_trace_print();

// fork(): waits until no thread is inside libunwind, and keeps new walks
// out until the fork is done (in the parent and in the child). libunwind
// holds a lock of its own while it walks: a child forked at that moment
// would wait for it forever.
void stack_trace_hold_for_fork();
void stack_trace_release_after_fork();

}  // namespace xalloc
