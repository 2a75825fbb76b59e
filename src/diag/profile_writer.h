// The heap profiler's output: profile files and the leak report, from a
// copy of the table's counts (profile_data.h). Nothing here takes the
// profiler's lock, so symbolising (dladdr takes the dynamic loader's lock,
// which a thread sampling inside dlopen holds) never waits behind it.
#pragma once

#include "diag/profile_data.h"

namespace xalloc::prof {

// Writes `<stem>.collapsed`, then `<stem>.heap`: each under a temporary
// name first, renamed once complete, so that a reader who sees the .heap
// file sees both files whole. False if either could not be written.
//
// .heap: the legacy text format google-pprof reads (heap_v2: pprof scales
// the samples up to estimated totals), with the process's mappings.
// .collapsed: one line per stack with live memory, outermost frame first,
// with its estimated bytes (for flame graphs).
bool write_profile(const char* stem, const ProfileView& view);

// XALLOC_LEAKS: the ten stacks with the most estimated live bytes, with
// their frames, as message() lines.
void print_leaks(const ProfileView& view);

}  // namespace xalloc::prof
