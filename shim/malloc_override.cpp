// The C allocation API: replaces malloc and its family in every program
// that loads libxalloc.so (LD_PRELOAD or -lxalloc) or links libxalloc.a.
//
// Each entry is a thin wrapper over the core's inline fast paths, so a
// malloc or free costs no extra call. glibc's internal names (__libc_*)
// and its extras (mallinfo2, malloc_trim, ...) are answered from xalloc's
// own state, never from glibc's unused arenas.
#include <malloc.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>

#include "frontend/alloc.h"
#include "api/entry_points.h"
#include "support/report.h"
#include "support/counters.h"
#include "xalloc/xalloc.h"

using namespace xalloc;

#define XALLOC_EXPORT extern "C" __attribute__((visibility("default")))

XALLOC_EXPORT void* malloc(size_t size) noexcept { return alloc(size); }
XALLOC_EXPORT void free(void* ptr) noexcept { xalloc::free(ptr, Caller::kFree); }
XALLOC_EXPORT void* calloc(size_t count, size_t size) noexcept { return entry::calloc(count, size); }
XALLOC_EXPORT void* realloc(void* ptr, size_t size) noexcept { return xalloc::realloc(ptr, size, Caller::kRealloc); }
XALLOC_EXPORT void* reallocarray(void* ptr, size_t count, size_t size) noexcept {
  return entry::reallocarray(ptr, count, size);
}
XALLOC_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  return entry::posix_memalign(out, alignment, size);
}
XALLOC_EXPORT void* aligned_alloc(size_t alignment, size_t size) noexcept {
  return entry::aligned_alloc(alignment, size);
}
XALLOC_EXPORT void* memalign(size_t alignment, size_t size) noexcept { return entry::memalign(alignment, size); }
XALLOC_EXPORT void* valloc(size_t size) noexcept { return entry::valloc(size); }
XALLOC_EXPORT void* pvalloc(size_t size) noexcept { return entry::pvalloc(size); }
XALLOC_EXPORT size_t malloc_usable_size(void* ptr) noexcept { return usable_size(ptr, Caller::kUsableSize); }

// C23.
XALLOC_EXPORT void free_sized(void* ptr, size_t) noexcept { xalloc::free(ptr, Caller::kFreeSized); }
XALLOC_EXPORT void free_aligned_sized(void* ptr, size_t, size_t) noexcept {
  xalloc::free(ptr, Caller::kFreeAlignedSized);
}

// Old and internal names.
XALLOC_EXPORT void cfree(void* ptr) noexcept { xalloc::free(ptr, Caller::kFree); }
XALLOC_EXPORT void* __libc_malloc(size_t size) noexcept { return alloc(size); }
XALLOC_EXPORT void __libc_free(void* ptr) noexcept { xalloc::free(ptr, Caller::kFree); }
XALLOC_EXPORT void* __libc_calloc(size_t count, size_t size) noexcept { return entry::calloc(count, size); }
XALLOC_EXPORT void* __libc_realloc(void* ptr, size_t size) noexcept {
  return xalloc::realloc(ptr, size, Caller::kRealloc);
}
XALLOC_EXPORT void* __libc_memalign(size_t alignment, size_t size) noexcept {
  return entry::memalign(alignment, size);
}
XALLOC_EXPORT void* __libc_valloc(size_t size) noexcept { return entry::valloc(size); }
XALLOC_EXPORT void* __libc_pvalloc(size_t size) noexcept { return entry::pvalloc(size); }
XALLOC_EXPORT int __posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  return entry::posix_memalign(out, alignment, size);
}

// --- glibc extras ---------------------------------------------------------

XALLOC_EXPORT int malloc_trim(size_t pad) noexcept { return xalloc_trim(pad); }

XALLOC_EXPORT struct mallinfo2 mallinfo2() noexcept {
  xalloc_stats_t s;
  entry::get_counters(&s);
  struct mallinfo2 info;
  memset(&info, 0, sizeof(info));
  info.arena = s.committed;                // bytes obtained from the OS and resident
  info.hblks = s.segments;                 // mappings held
  info.hblkhd = s.mapped;                  // bytes mapped
  info.uordblks = s.in_use;                // bytes in use
  info.fordblks = s.committed > s.in_use ? s.committed - s.in_use : 0;  // resident but free
  info.usmblks = 0;
  info.keepcost = 0;
  return info;
}

XALLOC_EXPORT struct mallinfo mallinfo() noexcept {
  // The old structure has int fields: saturate rather than wrap.
  struct mallinfo2 wide = mallinfo2();
  auto clamp = [](size_t v) { return v > 0x7fffffff ? 0x7fffffff : static_cast<int>(v); };
  struct mallinfo info;
  memset(&info, 0, sizeof(info));
  info.arena = clamp(wide.arena);
  info.hblks = clamp(wide.hblks);
  info.hblkhd = clamp(wide.hblkhd);
  info.uordblks = clamp(wide.uordblks);
  info.fordblks = clamp(wide.fordblks);
  return info;
}

XALLOC_EXPORT void malloc_stats() noexcept { xalloc_stats_print(); }

XALLOC_EXPORT int malloc_info(int options, FILE* stream) noexcept {
  if (options != 0 || stream == nullptr) {
    errno = EINVAL;
    return -1;
  }
  xalloc_stats_t s;
  entry::get_counters(&s);
  char text[512];
  const report::Arg args[] = {s.in_use, s.committed, s.mapped, s.segments, s.purged};
  report::format(text, sizeof(text),
                 "<malloc version=\"xalloc-1\">\n"
                 "<total type=\"in_use\" size=\"%u\"/>\n"
                 "<total type=\"committed\" size=\"%u\"/>\n"
                 "<total type=\"mapped\" size=\"%u\"/>\n"
                 "<total type=\"segments\" count=\"%u\"/>\n"
                 "<total type=\"purged\" size=\"%u\"/>\n"
                 "</malloc>\n",
                 args, 5);
  return fputs(text, stream) < 0 ? -1 : 0;
}

// glibc's tuning parameters do not apply to xalloc; they are accepted and
// ignored (XALLOC_* environment variables tune xalloc, docs/options.md).
XALLOC_EXPORT int mallopt(int, int) noexcept { return 1; }
