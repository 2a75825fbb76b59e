// Every form of C++ operator new and delete, served by xalloc.
//
// libxalloc.so depends on libc only. What the standard asks of a failing
// operator new (call the new_handler, throw std::bad_alloc) needs the C++
// runtime, which is reached through weak references: any program that
// calls operator new has libstdc++ loaded, so they resolve there.
#include <cstddef>
#include <new>

#include "api/entry_points.h"
#include "frontend/alloc.h"
#include "support/report.h"

namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
void __throw_bad_alloc() __attribute__((weak));
// Clang's handler for an exception escaping a noexcept function calls it.
void terminate() noexcept __attribute__((weak));
}  // namespace std

// Used by the try/catch in new_nothrow_slow; weak for the same reason.
extern "C" int __gxx_personality_v0(...) __attribute__((weak));
extern "C" void* __cxa_begin_catch(void*) noexcept __attribute__((weak));
extern "C" void __cxa_end_catch() __attribute__((weak));

#if !defined(XALLOC_STATIC_ARCHIVE)
#define XALLOC_STATIC_ARCHIVE 0
#endif

#if XALLOC_STATIC_ARCHIVE
// libxalloc.a: the C++ ABI's way to throw a std::bad_alloc without
// std::__throw_bad_alloc - the exception's storage and throw, and the
// class's type_info, vtable and destructor. A program whose C++ runtime is
// linked statically (-static-libstdc++, -static) gets the member of
// libstdc++.a that holds __throw_bad_alloc only when something else needs
// it (a weak reference does not pull an archive member in); one that
// catches std::bad_alloc has all of these. (Not in libxalloc.so, whose
// programs load libstdc++.so, which exports __throw_bad_alloc: five more
// symbols to bind would only slow every process's start.)
extern "C" void* __cxa_allocate_exception(size_t) noexcept __attribute__((weak));
extern "C" void __cxa_throw(void*, void*, void (*)(void*)) __attribute__((weak, noreturn));
extern char bad_alloc_type_info[] __asm__("_ZTISt9bad_alloc") __attribute__((weak));
extern void* bad_alloc_vtable[] __asm__("_ZTVSt9bad_alloc") __attribute__((weak));
extern void bad_alloc_destroy(void*) __asm__("_ZNSt9bad_allocD1Ev") __attribute__((weak));
#endif

using namespace xalloc;

namespace {

bool valid_alignment(size_t alignment) { return entry::is_power_of_two(alignment); }

[[noreturn]] XALLOC_NOINLINE void throw_bad_alloc() {
  if (&std::__throw_bad_alloc != nullptr) {
    std::__throw_bad_alloc();
    __builtin_unreachable();
  }
#if XALLOC_STATIC_ARCHIVE
  if (&__cxa_allocate_exception != nullptr && &__cxa_throw != nullptr && bad_alloc_type_info != nullptr &&
      bad_alloc_vtable != nullptr && &bad_alloc_destroy != nullptr) {
    static_assert(sizeof(std::bad_alloc) == sizeof(void*), "std::bad_alloc is its vtable pointer alone");
    // An object's vtable pointer points past the vtable's first two
    // entries (offset to top, type_info): Itanium C++ ABI, 2.5.
    void* exception = __cxa_allocate_exception(sizeof(std::bad_alloc));
    *static_cast<void**>(exception) = &bad_alloc_vtable[2];
    __cxa_throw(exception, bad_alloc_type_info, &bad_alloc_destroy);
  }
#endif
  report::fatal("out of memory in operator new, and no C++ runtime to throw std::bad_alloc");
}

XALLOC_INLINE void* try_alloc(size_t size, size_t alignment) {
  return alignment != 0 ? alloc_aligned(size, alignment) : alloc(size);
}

// [new.delete.single]: call the new_handler until allocation succeeds; with
// none installed, throw std::bad_alloc.
XALLOC_NOINLINE void* new_slow(size_t size, size_t alignment) {
  if (alignment != 0 && !valid_alignment(alignment)) throw_bad_alloc();
  for (;;) {
    void* block = try_alloc(size, alignment);
    if (block != nullptr) return block;
    std::new_handler handler = &std::get_new_handler != nullptr ? std::get_new_handler() : nullptr;
    if (handler == nullptr) throw_bad_alloc();
    handler();
  }
}

// The nothrow forms behave as if they called the throwing form and
// returned null if it did not return normally.
XALLOC_NOINLINE void* new_nothrow_slow(size_t size, size_t alignment) noexcept {
  if (alignment != 0 && !valid_alignment(alignment)) return nullptr;
  if (&std::get_new_handler == nullptr || std::get_new_handler() == nullptr) return nullptr;
  try {
    return new_slow(size, alignment);
  } catch (...) {
    return nullptr;
  }
}

// The ways out of line of operator new's malloc path (alloc_or): with the
// calls that must keep the size here, the inline part calls nothing and
// saves no register (3 instructions fewer per small `new`). The nothrow
// forms end in new_nothrow_slow.
template <bool kNothrow>
XALLOC_NOINLINE void* new_refill(Heap* heap, unsigned cls, size_t size) noexcept(kNothrow) {
  void* block = heap_alloc_slow(heap, cls, true, size);
  if (XALLOC_LIKELY(block != nullptr)) return block;
  if constexpr (kNothrow) return new_nothrow_slow(size, 0);
  return new_slow(size, 0);
}

template <bool kNothrow>
XALLOC_NOINLINE void* new_beyond_small(size_t size, Heap* heap) noexcept(kNothrow) {
  void* block = alloc_beyond_small(size, heap);
  if (XALLOC_LIKELY(block != nullptr)) return block;
  if constexpr (kNothrow) return new_nothrow_slow(size, 0);
  return new_slow(size, 0);
}

XALLOC_INLINE void* new_impl(size_t size) { return alloc_or(size, new_refill<false>, new_beyond_small<false>); }

XALLOC_INLINE void* new_aligned_impl(size_t size, std::align_val_t alignment) {
  auto a = static_cast<size_t>(alignment);
  void* block = valid_alignment(a) ? alloc_aligned(size, a) : nullptr;
  if (XALLOC_LIKELY(block != nullptr)) return block;
  return new_slow(size, a);
}

XALLOC_INLINE void* new_nothrow_impl(size_t size) noexcept {
  return alloc_or(size, new_refill<true>, new_beyond_small<true>);
}

XALLOC_INLINE void* new_aligned_nothrow_impl(size_t size, std::align_val_t alignment) noexcept {
  auto a = static_cast<size_t>(alignment);
  void* block = valid_alignment(a) ? alloc_aligned(size, a) : nullptr;
  if (XALLOC_LIKELY(block != nullptr)) return block;
  return new_nothrow_slow(size, a);
}

}  // namespace

void* operator new(size_t size) { return new_impl(size); }
void* operator new[](size_t size) { return new_impl(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return new_nothrow_impl(size); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return new_nothrow_impl(size); }
void* operator new(size_t size, std::align_val_t alignment) { return new_aligned_impl(size, alignment); }
void* operator new[](size_t size, std::align_val_t alignment) { return new_aligned_impl(size, alignment); }
void* operator new(size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return new_aligned_nothrow_impl(size, alignment);
}
void* operator new[](size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return new_aligned_nothrow_impl(size, alignment);
}

void operator delete(void* ptr) noexcept { xalloc::free(ptr, Caller::kDelete); }
void operator delete[](void* ptr) noexcept { xalloc::free(ptr, Caller::kDelete); }
void operator delete(void* ptr, const std::nothrow_t&) noexcept { xalloc::free(ptr, Caller::kDelete); }
void operator delete[](void* ptr, const std::nothrow_t&) noexcept { xalloc::free(ptr, Caller::kDelete); }
void operator delete(void* ptr, size_t) noexcept { xalloc::free(ptr, Caller::kDeleteSized); }
void operator delete[](void* ptr, size_t) noexcept { xalloc::free(ptr, Caller::kDeleteSized); }
void operator delete(void* ptr, std::align_val_t) noexcept { xalloc::free(ptr, Caller::kDeleteAligned); }
void operator delete[](void* ptr, std::align_val_t) noexcept { xalloc::free(ptr, Caller::kDeleteAligned); }
void operator delete(void* ptr, std::align_val_t, const std::nothrow_t&) noexcept {
  xalloc::free(ptr, Caller::kDeleteAligned);
}
void operator delete[](void* ptr, std::align_val_t, const std::nothrow_t&) noexcept {
  xalloc::free(ptr, Caller::kDeleteAligned);
}
void operator delete(void* ptr, size_t, std::align_val_t) noexcept { xalloc::free(ptr, Caller::kDeleteAligned); }
void operator delete[](void* ptr, size_t, std::align_val_t) noexcept { xalloc::free(ptr, Caller::kDeleteAligned); }

// The compiler references the personality routine with a strong binding;
// make it weak so that C programs without libstdc++ load libxalloc.so too.
// It is only ever called while an exception unwinds, which needs libstdc++.
__asm__(".weak __gxx_personality_v0");
// Likewise for what the catch in new_nothrow_slow (and, with clang, the
// terminate handler of noexcept functions) calls.
__asm__(".weak __cxa_begin_catch");
__asm__(".weak __cxa_end_catch");
__asm__(".weak _ZSt9terminatev");
