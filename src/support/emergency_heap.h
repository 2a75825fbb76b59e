// The emergency heap: serves the allocations made while xalloc reports
// heap misuse.
//
// A report prints a stack trace, and loading the unwinder (dlopen) and
// naming frames allocate. Those allocations must not come from the heap
// that may just have been misused, so the reporting thread switches to a
// static buffer served by bumping a pointer; its blocks are never reused,
// and frees of them are ignored. The switch happens only on the way to
// abort(), so the buffer is never needed twice.
#pragma once

#include <cstddef>

namespace xalloc::emergency {

// Commit on demand (options.h): the buffer's whole pages, 1 MiB that the
// kernel charges as writable data, become uncharged zero pages until a
// report needs them. Called once at start-up, before any report.
void init(bool commit_on_demand);

// The calling thread allocates from the emergency buffer from now on.
// Only one thread reports: another that calls this meanwhile waits for
// the report's abort (at most two seconds).
void enter();

// True while the calling thread is reporting (checked on slow paths only).
bool active();

bool owns(const void* ptr);
void* alloc(size_t size, size_t alignment);
void* realloc(void* ptr, size_t size);

}  // namespace xalloc::emergency
