// The prefixed API (include/xalloc/xalloc.h): usable without replacing the
// system allocator.
#include "xalloc/xalloc.h"

#include <cerrno>

#include "frontend/alloc.h"
#include "api/entry_points.h"
#include "frontend/heap.h"
#include "frontend/heap_upkeep.h"
#include "frontend/thread_registry.h"

using namespace xalloc;

extern "C" {

XALLOC_API void* xalloc_malloc(size_t size) noexcept { return alloc(size); }
XALLOC_API void xalloc_free(void* ptr) noexcept { free(ptr, Caller::kFree); }
XALLOC_API void* xalloc_calloc(size_t count, size_t size) noexcept { return entry::calloc(count, size); }
XALLOC_API void* xalloc_realloc(void* ptr, size_t size) noexcept { return realloc(ptr, size, Caller::kRealloc); }
XALLOC_API void* xalloc_reallocarray(void* ptr, size_t count, size_t size) noexcept {
  return entry::reallocarray(ptr, count, size);
}
XALLOC_API void xalloc_free_sized(void* ptr, size_t) noexcept { free(ptr, Caller::kFreeSized); }
XALLOC_API void xalloc_free_aligned_sized(void* ptr, size_t, size_t) noexcept {
  free(ptr, Caller::kFreeAlignedSized);
}
XALLOC_API void* xalloc_aligned_alloc(size_t alignment, size_t size) noexcept {
  return entry::aligned_alloc(alignment, size);
}
XALLOC_API int xalloc_posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  return entry::posix_memalign(out, alignment, size);
}
XALLOC_API void* xalloc_memalign(size_t alignment, size_t size) noexcept { return entry::memalign(alignment, size); }
XALLOC_API void* xalloc_valloc(size_t size) noexcept { return entry::valloc(size); }
XALLOC_API void* xalloc_pvalloc(size_t size) noexcept { return entry::pvalloc(size); }
XALLOC_API size_t xalloc_usable_size(const void* ptr) noexcept { return usable_size(ptr, Caller::kUsableSize); }
XALLOC_API int xalloc_owns(const void* ptr) noexcept { return owns(ptr) ? 1 : 0; }
XALLOC_API int xalloc_trim(size_t) noexcept { return trim() != 0 ? 1 : 0; }
XALLOC_API void xalloc_thread_collect(void) noexcept {
  if (t_heap != &g_empty_heap) heap_collect(t_heap);
}
#define XALLOC_STRINGIFY(x) #x
#define XALLOC_VERSION_TEXT(major, minor, patch) XALLOC_STRINGIFY(major) "." XALLOC_STRINGIFY(minor) "." XALLOC_STRINGIFY(patch)
XALLOC_API const char* xalloc_version(void) noexcept {
  return XALLOC_VERSION_TEXT(XALLOC_VERSION_MAJOR, XALLOC_VERSION_MINOR, XALLOC_VERSION_PATCH);
}

}  // extern "C"
