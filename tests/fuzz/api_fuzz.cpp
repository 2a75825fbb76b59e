// libFuzzer target: the whole prefixed allocation API (include/xalloc/xalloc.h).
//
// The input is a program: a sequence of operations over a table of 256
// slots, each empty or holding a live block. Every operation reads its
// arguments (slot, size, alignment, ...) from the input:
//
//   malloc, calloc, realloc, reallocarray, aligned_alloc, posix_memalign,
//   memalign, valloc, pvalloc            into a slot (an occupied slot is freed first)
//   free, free_sized, free_aligned_sized of a slot
//   usable_size / owns                   of a slot (and of NULL)
//   trim, thread_collect, verify-all
//
// Sizes are mostly small, then medium and large (up to a few MiB), rarely
// huge (~16-24 MiB) or impossible (SIZE_MAX, PTRDIFF_MAX + 1, ...);
// alignments are powers of two up to 2 MiB, sometimes up to 16 MiB, sometimes
// invalid. What is checked:
//
//   * every block is filled over its whole usable size with a pattern derived
//     from its slot and allocation number, verified before it is reallocated
//     or freed, after realloc up to the old requested size, and after trim and
//     thread_collect (catches overlapping blocks and lost contents);
//   * results are 16-byte aligned, and aligned to what was asked for;
//   * usable_size >= the requested size and does not change while the block lives;
//   * calloc's memory is zero;
//   * impossible sizes and overflowing products give NULL and ENOMEM,
//     invalid alignments EINVAL, posix_memalign leaves *out and errno alone on
//     failure, and a failed realloc leaves the block intact;
//   * at the end of each input everything is freed, and the bytes in use
//     (xalloc_get_stats) are back to what they were before it.
//
// The fuzzer process allocates its own memory with the C library (ASan's
// allocator): xalloc's functions are a separate heap here.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "fuzz_common.h"
#include "xalloc/xalloc.h"

using namespace xfuzz;

namespace {

enum class Kind : uint8_t { kMalloc, kCalloc, kRealloc, kAlignedAlloc, kPosixMemalign, kMemalign, kValloc, kPvalloc };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kMalloc: return "malloc";
    case Kind::kCalloc: return "calloc";
    case Kind::kRealloc: return "realloc";
    case Kind::kAlignedAlloc: return "aligned_alloc";
    case Kind::kPosixMemalign: return "posix_memalign";
    case Kind::kMemalign: return "memalign";
    case Kind::kValloc: return "valloc";
    case Kind::kPvalloc: return "pvalloc";
  }
  return "?";
}

struct Slot {
  void* p = nullptr;
  size_t requested = 0;  // what the program asked for
  size_t usable = 0;     // usable_size right after allocation, all filled with the pattern
  size_t alignment = 0;  // for free_aligned_sized
  uint64_t seed = 0;
  Kind kind = Kind::kMalloc;
};

constexpr size_t kSlots = 256;
// Live requested bytes are kept under this (sizes beyond it are reduced),
// so that an input cannot exhaust the machine's memory.
constexpr size_t kLiveBudget = 384 * kMiB;
constexpr size_t kMaxOps = 4096;

Slot g_slots[kSlots];
size_t g_live_bytes = 0;
uint64_t g_allocations = 0;
size_t g_baseline_in_use = 0;

// Bytes in use. The secure build counts the blocks waiting in the
// thread's quarantine as in use: they are freed for real first.
size_t in_use() {
#if defined(XFUZZ_SECURE)
  xalloc_thread_collect();
#endif
  xalloc_stats_t s;
  xalloc_get_stats(&s);
  return s.in_use;
}

// Keeps the live total under the budget: an oversized request becomes a
// small one (impossible sizes stay as they are: they never succeed).
size_t budget(size_t size) {
  if (is_impossible(size)) return size;
  if (g_live_bytes + size > kLiveBudget) return size % 4096;
  return size;
}

void verify(const Slot& s, size_t index, const char* when, size_t limit = SIZE_MAX) {
  size_t bad = check_pattern(s.p, s.usable, s.seed, limit);
  XFUZZ_CHECK(bad == SIZE_MAX,
              "slot %zu (%s of %zu bytes, usable %zu, at %p): pattern damaged at offset %zu (%s)", index,
              kind_name(s.kind), s.requested, s.usable, s.p, bad, when);
}

void release(size_t index, int how) {
  Slot& s = g_slots[index];
  if (s.p == nullptr) return;
  verify(s, index, "before free");
  size_t usable = xalloc_usable_size(s.p);
  XFUZZ_CHECK(usable == s.usable, "slot %zu: usable size changed from %zu to %zu while live", index, s.usable, usable);
  // free_sized wants the size of a malloc/calloc/realloc block;
  // free_aligned_sized the alignment and size of an aligned_alloc block.
  if (how == 1 && (s.kind == Kind::kMalloc || s.kind == Kind::kCalloc || s.kind == Kind::kRealloc)) {
    xalloc_free_sized(s.p, s.requested);
  } else if (how == 2 && s.kind == Kind::kAlignedAlloc) {
    xalloc_free_aligned_sized(s.p, s.alignment, s.requested);
  } else {
    xalloc_free(s.p);
  }
  g_live_bytes -= s.requested;
  s = Slot{};
}

// Records a new block in a (free) slot, checks it, fills it.
void adopt(size_t index, void* p, size_t requested, Kind kind, size_t alignment, bool zeroed) {
  XFUZZ_CHECK(p != nullptr, "%s of %zu bytes (alignment %zu) failed: errno %d", kind_name(kind), requested, alignment,
              errno);
  XFUZZ_CHECK(aligned_to(p, 16), "%s of %zu bytes returned %p, not 16-byte aligned", kind_name(kind), requested, p);
  if (alignment > 1) {
    XFUZZ_CHECK(aligned_to(p, alignment), "%s(%zu, %zu) returned %p, not aligned", kind_name(kind), alignment,
                requested, p);
  }
  XFUZZ_CHECK(xalloc_owns(p) == 1, "%s of %zu bytes returned %p, which xalloc_owns denies", kind_name(kind), requested,
              p);
  size_t usable = xalloc_usable_size(p);
  XFUZZ_CHECK(usable >= requested, "%s of %zu bytes: usable size %zu", kind_name(kind), requested, usable);
  if (zeroed) {
    size_t bad = check_zero(p, requested);
    XFUZZ_CHECK(bad == SIZE_MAX, "calloc of %zu bytes at %p: byte %zu is not zero", requested, p, bad);
  }
  Slot& s = g_slots[index];
  s.p = p;
  s.requested = requested;
  s.usable = usable;
  s.alignment = alignment;
  s.kind = kind;
  s.seed = (static_cast<uint64_t>(index) << 40) ^ ++g_allocations;
  fill_pattern(p, usable, s.seed);
  g_live_bytes += requested;
}

void expect_failure(void* p, int expected_errno, const char* what, size_t a, size_t b) {
  XFUZZ_CHECK(p == nullptr, "%s(%zu, %zu) should fail, returned %p", what, a, b, p);
  XFUZZ_CHECK(errno == expected_errno, "%s(%zu, %zu) failed with errno %d, expected %d", what, a, b, errno,
              expected_errno);
}

// Alignments above 16 MiB may be honoured or refused with ENOMEM (the
// documented limit is 16 MiB; the core accepts more).
constexpr size_t kMaxDocumentedAlignment = 16 * kMiB;

// aligned_alloc / memalign result check. effective: the alignment really
// requested (memalign rounds up).
void aligned_result(size_t index, void* p, Kind kind, size_t alignment, size_t effective, size_t size) {
  if (is_impossible(size)) {
    expect_failure(p, ENOMEM, kind_name(kind), alignment, size);
    return;
  }
  if (p == nullptr && effective > kMaxDocumentedAlignment) {
    XFUZZ_CHECK(errno == ENOMEM, "%s(%zu, %zu): errno %d", kind_name(kind), alignment, size, errno);
    return;
  }
  adopt(index, p, size, kind, effective, false);
}

void op_malloc(Reader& r) {
  size_t index = r.u8();
  size_t size = budget(draw_size(r));
  release(index, 0);
  errno = 0;
  void* p = xalloc_malloc(size);
  if (is_impossible(size)) return expect_failure(p, ENOMEM, "malloc", size, 0);
  adopt(index, p, size, Kind::kMalloc, 0, false);
}

// count x size for calloc and reallocarray: mostly a real block, sometimes
// an overflowing product.
void draw_product(Reader& r, size_t* count, size_t* size, bool* overflows) {
  uint8_t sel = r.u8();
  if (sel < 232) {
    size_t total = draw_size(r);
    size_t n = 1 + r.u8() % 64;
    if (sel % 7 == 0) n = 0;  // zero elements
    *count = n;
    *size = n == 0 ? total : total / n;
    if (sel % 5 == 0) std::swap(*count, *size);
    *overflows = false;
    return;
  }
  static constexpr struct {
    size_t n, size;
  } kOverflow[] = {{SIZE_MAX, 2},           {2, SIZE_MAX},           {size_t{1} << 32, size_t{1} << 32},
                   {SIZE_MAX / 3 + 1, 3},   {kPtrdiffMax, 2},        {65537, size_t{1} << 48},
                   {SIZE_MAX / 16 + 1, 16}, {size_t{1} << 33, size_t{1} << 31}};
  auto c = kOverflow[r.u8() % (sizeof kOverflow / sizeof kOverflow[0])];
  *count = c.n;
  *size = c.size;
  *overflows = true;
}

void op_calloc(Reader& r) {
  size_t index = r.u8();
  size_t count, size;
  bool overflows;
  draw_product(r, &count, &size, &overflows);
  size_t total = overflows ? SIZE_MAX : count * size;
  if (!overflows && budget(total) != total) {
    count = total % 4096;
    size = 1;
    total = count;
  }
  release(index, 0);
  errno = 0;
  void* p = xalloc_calloc(count, size);
  if (overflows || is_impossible(total)) return expect_failure(p, ENOMEM, "calloc", count, size);
  adopt(index, p, total, Kind::kCalloc, 0, true);
}

// Reallocation of a slot (empty: realloc(NULL, ...)).
void reallocate(size_t index, bool array, size_t count, size_t size, bool overflows) {
  Slot& s = g_slots[index];
  size_t new_size = overflows ? SIZE_MAX : count * size;
  if (s.p != nullptr) {
    verify(s, index, "before realloc");
  }
  errno = 0;
  void* p = array ? xalloc_reallocarray(s.p, count, size) : xalloc_realloc(s.p, new_size);
  const char* what = array ? "reallocarray" : "realloc";
  if (overflows || is_impossible(new_size)) {
    expect_failure(p, ENOMEM, what, count, size);
    if (s.p != nullptr) verify(s, index, "after a failed realloc");
    return;
  }
  if (s.p != nullptr && new_size == 0) {
    // glibc's realloc(p, 0) frees p and returns NULL; a new minimal block
    // would be allowed too.
    g_live_bytes -= s.requested;
    s = Slot{};
    if (p != nullptr) adopt(index, p, 0, Kind::kRealloc, 0, false);
    return;
  }
  if (s.p == nullptr) {
    adopt(index, p, new_size, Kind::kRealloc, 0, false);
    return;
  }
  XFUZZ_CHECK(p != nullptr, "%s(%p, %zu) failed: errno %d", what, s.p, new_size, errno);
  Slot old = s;
  // The contents up to the smaller of the two requested sizes moved with the block.
  size_t kept = old.requested < new_size ? old.requested : new_size;
  size_t bad = check_pattern(p, old.usable, old.seed, kept);
  XFUZZ_CHECK(bad == SIZE_MAX, "%s(%p [%zu bytes], %zu) = %p: old contents damaged at offset %zu", what, old.p,
              old.requested, new_size, p, bad);
  XFUZZ_CHECK(aligned_to(p, 16), "%s returned %p, not 16-byte aligned", what, p);
  size_t usable = xalloc_usable_size(p);
  XFUZZ_CHECK(usable >= new_size, "%s(%p, %zu) = %p: usable size %zu", what, old.p, new_size, p, usable);
  g_live_bytes -= old.requested;
  s.p = p;
  s.requested = new_size;
  s.usable = usable;
  s.kind = Kind::kRealloc;
  s.alignment = 0;
  // Same seed: the moved prefix already holds the pattern; extend it.
  fill_pattern(p, usable, s.seed);
  g_live_bytes += new_size;
}

void op_realloc(Reader& r) {
  size_t index = r.u8();
  size_t size = draw_size(r);
  const Slot& s = g_slots[index];
  if (!is_impossible(size) && g_live_bytes - s.requested + size > kLiveBudget) size %= 4096;
  reallocate(index, false, size, 1, false);
}

void op_reallocarray(Reader& r) {
  size_t index = r.u8();
  size_t count, size;
  bool overflows;
  draw_product(r, &count, &size, &overflows);
  const Slot& s = g_slots[index];
  if (!overflows && !is_impossible(count * size) && g_live_bytes - s.requested + count * size > kLiveBudget) {
    count = (count * size) % 4096;
    size = 1;
  }
  reallocate(index, true, count, size, overflows);
}

void op_aligned_alloc(Reader& r) {
  size_t index = r.u8();
  size_t alignment = draw_alignment(r);
  size_t size = budget(draw_size(r));
  release(index, 0);
  errno = 0;
  void* p = xalloc_aligned_alloc(alignment, size);
  if (!is_power_of_two(alignment)) return expect_failure(p, EINVAL, "aligned_alloc", alignment, size);
  aligned_result(index, p, Kind::kAlignedAlloc, alignment, alignment, size);
}

void op_posix_memalign(Reader& r) {
  size_t index = r.u8();
  size_t alignment = draw_alignment(r);
  size_t size = budget(draw_size(r));
  release(index, 0);
  void* const kUntouched = reinterpret_cast<void*>(uintptr_t{0x5a5a5a5a5a5a5a5a});
  void* out = kUntouched;
  errno = 4242;
  int rc = xalloc_posix_memalign(&out, alignment, size);
  int err = errno;
  bool bad_alignment = !is_power_of_two(alignment) || alignment % sizeof(void*) != 0;
  if (rc != 0) {
    XFUZZ_CHECK(out == kUntouched, "posix_memalign(%zu, %zu) failed (%d) but changed *out", alignment, size, rc);
    XFUZZ_CHECK(err == 4242, "posix_memalign(%zu, %zu) failed (%d) and changed errno to %d", alignment, size, rc, err);
  }
  if (bad_alignment) {
    XFUZZ_CHECK(rc == EINVAL, "posix_memalign(%zu, %zu) = %d, expected EINVAL", alignment, size, rc);
    return;
  }
  if (is_impossible(size)) {
    XFUZZ_CHECK(rc == ENOMEM, "posix_memalign(%zu, %zu) = %d, expected ENOMEM", alignment, size, rc);
    return;
  }
  if (rc == ENOMEM && alignment > kMaxDocumentedAlignment) return;
  XFUZZ_CHECK(rc == 0, "posix_memalign(%zu, %zu) = %d", alignment, size, rc);
  adopt(index, out, size, Kind::kPosixMemalign, alignment, false);
}

void op_memalign(Reader& r) {
  size_t index = r.u8();
  size_t alignment = draw_alignment(r);
  size_t size = budget(draw_size(r));
  release(index, 0);
  errno = 0;
  void* p = xalloc_memalign(alignment, size);
  // glibc's rules: a non-power of two is rounded up to the next one;
  // beyond 2^63 that is impossible: EINVAL.
  size_t effective = alignment;
  if (!is_power_of_two(alignment)) {
    if (alignment > (size_t{1} << 63)) return expect_failure(p, EINVAL, "memalign", alignment, size);
    effective = alignment == 0 ? 1 : size_t{1} << (64 - __builtin_clzll(alignment));
  }
  aligned_result(index, p, Kind::kMemalign, alignment, effective, size);
}

void op_valloc(Reader& r, bool page_rounded) {
  size_t index = r.u8();
  size_t size = budget(draw_size(r));
  release(index, 0);
  errno = 0;
  void* p = page_rounded ? xalloc_pvalloc(size) : xalloc_valloc(size);
  const char* what = page_rounded ? "pvalloc" : "valloc";
  if (is_impossible(size)) return expect_failure(p, ENOMEM, what, size, 0);
  XFUZZ_CHECK(p != nullptr, "%s(%zu) failed: errno %d", what, size, errno);
  if (page_rounded) {
    size_t rounded = size == 0 ? kPage : (size + kPage - 1) & ~(kPage - 1);
    size_t usable = xalloc_usable_size(p);
    XFUZZ_CHECK(usable >= rounded, "pvalloc(%zu): usable size %zu, less than the page-rounded %zu", size, usable,
                rounded);
  }
  adopt(index, p, size, page_rounded ? Kind::kPvalloc : Kind::kValloc, kPage, false);
}

void op_usable(Reader& r) {
  size_t index = r.u8();
  XFUZZ_CHECK(xalloc_usable_size(nullptr) == 0, "usable_size(NULL) != 0");
  XFUZZ_CHECK(xalloc_owns(nullptr) == 0, "owns(NULL) != 0");
  const Slot& s = g_slots[index];
  if (s.p == nullptr) return;
  size_t usable = xalloc_usable_size(s.p);
  XFUZZ_CHECK(usable == s.usable, "slot %zu (%s of %zu): usable size changed from %zu to %zu", index,
              kind_name(s.kind), s.requested, s.usable, usable);
  XFUZZ_CHECK(xalloc_owns(s.p) == 1, "owns(%p) == 0 for a live block", s.p);
  if (s.usable > 0) {
    XFUZZ_CHECK(xalloc_owns(static_cast<char*>(s.p) + s.usable - 1) == 1, "owns(last byte of %p) == 0", s.p);
  }
  verify(s, index, "usable_size check");
}

void verify_all(const char* when) {
  for (size_t i = 0; i < kSlots; ++i) {
    if (g_slots[i].p != nullptr) verify(g_slots[i], i, when);
  }
}

void run(Reader& r) {
  for (size_t ops = 0; ops < kMaxOps && !r.done(); ++ops) {
    uint8_t op = r.u8();
    switch (op % 24) {
      case 0: case 1: case 2: case 3: op_malloc(r); break;
      case 4: case 5: op_calloc(r); break;
      case 6: case 7: op_realloc(r); break;
      case 8: op_reallocarray(r); break;
      case 9: op_aligned_alloc(r); break;
      case 10: op_posix_memalign(r); break;
      case 11: op_memalign(r); break;
      case 12: op_valloc(r, false); break;
      case 13: op_valloc(r, true); break;
      case 14: case 15: case 16: release(r.u8(), 0); break;
      case 17: release(r.u8(), 1); break;
      case 18: release(r.u8(), 2); break;
      case 19: op_usable(r); break;
      case 20: {
        // Trim is expensive (it purges everything): only when the gate byte says so.
        uint8_t gate = r.u8(), pad = r.u8();
        if (gate < 32) {
          (void)xalloc_trim(pad);
          verify_all("after trim");
        }
        break;
      }
      case 21:
        xalloc_thread_collect();
        verify_all("after thread_collect");
        break;
      case 22: verify_all("verify-all"); break;
      case 23: {
        // Free a run of slots: empties slabs, returns spans.
        size_t first = r.u8(), n = r.u8() % 64;
        for (size_t i = 0; i < n; ++i) release((first + i) % kSlots, static_cast<int>(i % 3));
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
#if defined(XFUZZ_SECURE)
  // Freed huge blocks are sealed when the purge gives their pages back;
  // with no delay that happens at the next purge check, a few milliseconds
  // on, so inputs reach sealed, reopened and resealed mappings (which the
  // default half-second delay rarely lets a run see). Set before the first
  // call: the options are read then.
  setenv("XALLOC_PURGE_DELAY_MS", "0", 0);
#endif
  // Set the allocator up (and its thread heap) before measuring.
  xalloc_free(xalloc_malloc(16));
  g_baseline_in_use = in_use();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  run(r);
  verify_all("at the end");
  for (size_t i = 0; i < kSlots; ++i) release(i, static_cast<int>(i % 3));
  XFUZZ_CHECK(g_live_bytes == 0, "live byte count %zu", g_live_bytes);
  size_t now = in_use();
  XFUZZ_CHECK(now == g_baseline_in_use, "bytes in use %zu after freeing everything, %zu before", now,
              g_baseline_in_use);
  return 0;
}
