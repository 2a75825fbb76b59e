/*
 * xalloc: a general-purpose malloc replacement for x86-64 Linux.
 *
 * This header declares the prefixed API. It is available whether or not
 * xalloc also replaces the system allocator, so the allocator can be used
 * side by side with glibc's malloc (and tested under sanitizers).
 *
 * Every function follows the semantics of its standard counterpart
 * (xalloc_malloc ~ malloc, xalloc_posix_memalign ~ posix_memalign, ...).
 */
#ifndef XALLOC_XALLOC_H
#define XALLOC_XALLOC_H

#include <stddef.h>

#define XALLOC_VERSION_MAJOR 0
#define XALLOC_VERSION_MINOR 1
#define XALLOC_VERSION_PATCH 0
#define XALLOC_VERSION ((XALLOC_VERSION_MAJOR * 10000) + (XALLOC_VERSION_MINOR * 100) + XALLOC_VERSION_PATCH)

#if defined(XALLOC_BUILDING)
#define XALLOC_API __attribute__((visibility("default")))
#else
#define XALLOC_API
#endif

#ifdef __cplusplus
#define XALLOC_NOEXCEPT noexcept
extern "C" {
#else
#define XALLOC_NOEXCEPT
#endif

#define XALLOC_MALLOC_ATTR __attribute__((malloc, warn_unused_result))

XALLOC_API void* xalloc_malloc(size_t size) XALLOC_NOEXCEPT XALLOC_MALLOC_ATTR;
XALLOC_API void* xalloc_calloc(size_t count, size_t size) XALLOC_NOEXCEPT XALLOC_MALLOC_ATTR;
XALLOC_API void* xalloc_realloc(void* ptr, size_t size) XALLOC_NOEXCEPT __attribute__((warn_unused_result));
XALLOC_API void* xalloc_reallocarray(void* ptr, size_t count, size_t size) XALLOC_NOEXCEPT
    __attribute__((warn_unused_result));
XALLOC_API void xalloc_free(void* ptr) XALLOC_NOEXCEPT;

/* C23: the size (and alignment) must be the ones the block was requested with. */
XALLOC_API void xalloc_free_sized(void* ptr, size_t size) XALLOC_NOEXCEPT;
XALLOC_API void xalloc_free_aligned_sized(void* ptr, size_t alignment, size_t size) XALLOC_NOEXCEPT;

/* Alignment: every power of two is accepted (up to 1 GiB); see docs/api.md
 * for the exact error rules, which follow glibc. */
XALLOC_API void* xalloc_aligned_alloc(size_t alignment, size_t size) XALLOC_NOEXCEPT XALLOC_MALLOC_ATTR;
XALLOC_API int xalloc_posix_memalign(void** out, size_t alignment, size_t size) XALLOC_NOEXCEPT;
XALLOC_API void* xalloc_memalign(size_t alignment, size_t size) XALLOC_NOEXCEPT XALLOC_MALLOC_ATTR;
XALLOC_API void* xalloc_valloc(size_t size) XALLOC_NOEXCEPT XALLOC_MALLOC_ATTR;
XALLOC_API void* xalloc_pvalloc(size_t size) XALLOC_NOEXCEPT XALLOC_MALLOC_ATTR;

/* The number of bytes the block can really hold (>= the requested size). 0 for NULL.
 * For a pointer inside a live block, the bytes from it to the block's usable
 * end; 0 past that end and in free memory. */
XALLOC_API size_t xalloc_usable_size(const void* ptr) XALLOC_NOEXCEPT;

/* 1 if ptr points into memory that xalloc manages (the start of a live
 * block or not), 0 otherwise. Never faults. */
XALLOC_API int xalloc_owns(const void* ptr) XALLOC_NOEXCEPT;

/* Returns free memory to the OS now (what malloc_trim does). Returns 1 if
 * any memory was returned, 0 otherwise. */
XALLOC_API int xalloc_trim(size_t pad) XALLOC_NOEXCEPT;

/* Hands everything the calling thread caches back to the shared pool, as
 * thread exit does, without ending the thread. */
XALLOC_API void xalloc_thread_collect(void) XALLOC_NOEXCEPT;

/* Where the process's resident memory goes (bytes): xalloc's part split by
 * what it holds, from the pages the kernel reports resident in each span
 * (docs/memory.md, "Where the bytes go"). What is left of `resident` is the
 * program's own (code, stacks, other mappings). */
typedef struct xalloc_account_s {
  size_t resident;       /* the whole process's resident memory */
  size_t committed;      /* xalloc's memory that may be resident (as `committed` below) */
  size_t live;           /* live blocks: requested bytes when requested_known, else block sizes */
  size_t rounding;       /* block sizes less requested sizes: an estimate per class from the mean
                            request (requested_known only), and large spans' resident tails */
  size_t slab_free;      /* free blocks in slabs that hold live blocks */
  size_t empty_current;  /* empty slabs that are their class's current slab */
  size_t empty_spares;   /* empty slabs threads keep as spares */
  size_t empty_pooled;   /* empty slabs in the shared pool */
  size_t free_spans;     /* free spans not purged yet, cached huge mappings */
  size_t kept_spans;     /* spans of freed large blocks threads keep for reuse */
  size_t pending_frees;  /* blocks freed by other threads, not yet back with their owner */
  size_t metadata;       /* segment headers, the segment map, thread heaps */
  size_t requested_known; /* 1 when requests were counted from the start (XALLOC_STATS=1) */
  size_t slab_free_current; /* of slab_free, in slabs that are their class's current slab */
} xalloc_account_t;

/* Process-wide counters (bytes unless named otherwise). Before 1.0, fields
 * may be appended from one release to the next (0.1: `pooled`, `account`,
 * `peak_account`): build against the header of the library you run. */
typedef struct xalloc_stats_s {
  size_t mapped;        /* address space reserved from the OS */
  size_t committed;     /* mapped and not purged: what may be resident */
  size_t in_use;        /* bytes in live blocks (rounded to their class) */
  size_t large_in_use;  /* of which in large and huge blocks */
  size_t purged;        /* bytes returned to the OS with madvise, total */
  size_t segments;      /* number of regions currently mapped */
  size_t threads;       /* thread heaps ever created (reused ones count once) */
  size_t remote_frees;  /* blocks freed by a thread that does not own them */
  size_t pooled;        /* empty slabs kept for any thread's reuse (at most 4 MiB) */
  /* Transparent huge pages (XALLOC_HUGE_PAGES). The first two come from
   * /proc/self/smaps, read at each call (milliseconds for a big process):
   * 0 where it cannot be read. */
  size_t resident;        /* xalloc's memory resident now */
  size_t on_huge_pages;   /* of which on huge pages (AnonHugePages) */
  size_t faults_avoided;  /* 4 KiB page faults avoided by 2 MiB ranges advised before their first
                             touch (511 each, where the kernel allows huge pages): slab ranges and
                             huge blocks' mappings */
  /* XALLOC_STATS=1: the account (above) taken when the process's resident
   * memory, looked at whenever xalloc takes a slab or a large block, last
   * rose a thirty-second (and at least 64 KiB) past the one before, so
   * within that of its peak; zero otherwise. */
  xalloc_account_t peak_account;
} xalloc_stats_t;

XALLOC_API void xalloc_get_stats(xalloc_stats_t* out) XALLOC_NOEXCEPT;
/* The account now: a walk of every span with a system call each (slow). */
XALLOC_API void xalloc_get_account(xalloc_account_t* out) XALLOC_NOEXCEPT;
XALLOC_API void xalloc_stats_print(void) XALLOC_NOEXCEPT;

/* The counting build (cmake -DXALLOC_COUNT_SHARED=ON, docs/design.md):
 * how often threads wrote what other threads write too, since counting
 * (re)started. Returns 1 and fills *out in that build; 0 and zeros in
 * others. */
typedef struct xalloc_shared_writes_s {
  size_t lock_acquisitions;  /* of locks that more than one thread has taken */
  size_t atomic_rmws;        /* on cache lines that more than one thread has written */
  size_t mallocs;            /* blocks allocated (malloc, calloc, new, aligned) */
} xalloc_shared_writes_t;

XALLOC_API int xalloc_shared_writes(xalloc_shared_writes_t* out) XALLOC_NOEXCEPT;
/* Counting build: counting starts afresh now (after a warm-up, say). */
XALLOC_API void xalloc_shared_writes_restart(void) XALLOC_NOEXCEPT;

/* Heap profiler (XALLOC_PROF=1): writes <prefix>.heap (google-pprof) and
 * <prefix>.collapsed (flame graphs) for the memory live now; prefix NULL
 * writes the process's next numbered profile,
 * <XALLOC_PROF_PREFIX>.<pid>.<seq>. Returns 0 when profiling is off or the
 * files could not be written. */
XALLOC_API int xalloc_prof_dump(const char* prefix) XALLOC_NOEXCEPT;

/* "MAJOR.MINOR.PATCH" */
XALLOC_API const char* xalloc_version(void) XALLOC_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* XALLOC_XALLOC_H */
