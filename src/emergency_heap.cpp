#include "emergency_heap.h"

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "heap.h"

namespace xalloc::emergency {

namespace {

constexpr size_t kBufferBytes = 1 << 20;
// (Not page-aligned: that would align all of .bss, and put the first
// variable of .bss, which the C runtime reads and then writes at exit, on
// a page of its own - two page faults in every process.)
alignas(64) char g_buffer[kBufferBytes];
size_t g_used = 0;  // only the reporting thread bumps it
__thread bool t_active = false;

}  // namespace

void enter() {
  t_active = true;
  // Every fast path misses on the empty heap, so all allocations of this
  // thread reach the slow paths, which check active().
  t_heap = &g_empty_heap;
}

bool active() { return t_active; }

bool owns(const void* ptr) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  auto base = reinterpret_cast<uintptr_t>(g_buffer);
  return p >= base && p < base + kBufferBytes;
}

void* alloc(size_t size, size_t alignment) {
  if (alignment < 16) alignment = 16;
  // Each block is preceded by its size, for realloc. Aligned as an
  // address: the buffer itself is only 64-byte aligned.
  auto base = reinterpret_cast<uintptr_t>(g_buffer);
  size_t start = ((base + g_used + sizeof(size_t) + alignment - 1) & ~(alignment - 1)) - base;
  if (start + size > kBufferBytes || start + size < start) {
    errno = ENOMEM;
    return nullptr;
  }
  memcpy(g_buffer + start - sizeof(size_t), &size, sizeof(size_t));
  g_used = start + size;
  return g_buffer + start;
}

void* realloc(void* ptr, size_t size) {
  void* fresh = alloc(size, 16);
  if (fresh != nullptr && ptr != nullptr) {
    size_t old_size;
    memcpy(&old_size, static_cast<char*>(ptr) - sizeof(size_t), sizeof(size_t));
    memcpy(fresh, ptr, old_size < size ? old_size : size);
  }
  return fresh;
}

}  // namespace xalloc::emergency
