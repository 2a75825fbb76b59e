// libFuzzer target: xalloc's misuse detector (docs/security.md).
//
// The input is a program of valid operations (malloc, calloc, realloc,
// aligned_alloc, free of blocks from 1 byte to ~24 MiB, in a table of 64
// slots) with, for about a quarter of the inputs, one planted misuse that
// the input chooses:
//
//   double free     of a live slot: freed (by this thread or by another
//                   one), then some other slots freed, then freed again
//                   (free, free_sized, free_aligned_sized or realloc)
//   stale realloc   p = realloc(q, n) moved the block; then free(q)
//   interior free   of slot + offset, 0 < offset < usable size
//   foreign free    of a pointer xalloc never handed out: the stack, a
//                   global, a C-library heap block, an anonymous mapping,
//                   small and non-canonical addresses, or an address taken
//                   from the input (when xalloc_owns() says it is not ours)
//
// A detected misuse aborts the process, so the planted part runs in a
// forked child, which must die of SIGABRT with its first stderr line being
// xalloc's report of that misuse, with the right address, entry point and
// (for slab blocks) class, or (for large and huge blocks) their kind:
//
//   xalloc: double free of 0x... (48-byte class) in free()
//   xalloc: double free of 0x... (large block) in free()
//   xalloc: invalid free (not the start of a block) of 0x... in free_sized()
//   xalloc: invalid free (pointer not allocated by xalloc) of 0x... in realloc()
//
// Any other outcome (the child exits normally, hangs, crashes otherwise,
// prints another line) is a failure: __builtin_trap() in the parent.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "xalloc/xalloc.h"

using namespace xfuzz;

namespace {

struct Slot {
  void* p = nullptr;
  size_t requested = 0;
  size_t usable = 0;
  size_t alignment = 0;  // non-zero: from aligned_alloc
  bool sized = false;    // from malloc/calloc/realloc: free_sized applies
  uint64_t seed = 0;
};

constexpr size_t kSlots = 64;
constexpr size_t kLiveBudget = 256 * kMiB;
constexpr size_t kMaxOps = 1024;

Slot g_slots[kSlots];
size_t g_live_bytes = 0;
uint64_t g_allocations = 0;

// Foreign memory, set up once.
void* g_libc_block = nullptr;
void* g_mapping = nullptr;
alignas(64) char g_global[256];
// XTEST_FUZZ_VERBOSE=1: print every planted misuse and the child's report.
bool g_verbose = false;

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return buf;
}

// --- valid operations ----------------------------------------------------------

void release(size_t index) {
  Slot& s = g_slots[index];
  if (s.p == nullptr) return;
  size_t bad = check_pattern(s.p, s.usable, s.seed);
  XFUZZ_CHECK(bad == SIZE_MAX, "slot %zu (%zu bytes at %p): pattern damaged at %zu", index, s.requested, s.p, bad);
  xalloc_free(s.p);
  g_live_bytes -= s.requested;
  s = Slot{};
}

void adopt(size_t index, void* p, size_t size, size_t alignment, bool sized) {
  XFUZZ_CHECK(p != nullptr, "allocation of %zu bytes failed: errno %d", size, errno);
  Slot& s = g_slots[index];
  s.p = p;
  s.requested = size;
  s.usable = xalloc_usable_size(p);
  XFUZZ_CHECK(s.usable >= size, "usable size %zu < %zu", s.usable, size);
  s.alignment = alignment;
  s.sized = sized;
  s.seed = ++g_allocations;
  fill_pattern(p, s.usable, s.seed);
  g_live_bytes += size;
}

size_t valid_size(Reader& r) {
  size_t size = draw_size(r);
  if (is_impossible(size) || g_live_bytes + size > kLiveBudget) size %= 2048;
  return size;
}

void op_alloc(Reader& r, uint8_t how) {
  size_t index = r.u8() % kSlots;
  release(index);
  size_t size = valid_size(r);
  switch (how % 4) {
    case 0: adopt(index, xalloc_malloc(size), size, 0, true); break;
    case 1: adopt(index, xalloc_calloc(1, size), size, 0, true); break;
    case 2: {
      size_t alignment = size_t{1} << (r.u8() % 22);
      adopt(index, xalloc_aligned_alloc(alignment, size), size, alignment, false);
      break;
    }
    case 3: adopt(index, xalloc_realloc(nullptr, size), size, 0, true); break;
  }
}

void op_realloc(Reader& r) {
  size_t index = r.u8() % kSlots;
  size_t size = valid_size(r);  // read first: the input's layout does not depend on the table
  Slot& s = g_slots[index];
  if (s.p == nullptr) return;
  if (size == 0) size = 1;
  if (g_live_bytes - s.requested + size > kLiveBudget) size %= 2048;
  size_t kept = size < s.requested ? size : s.requested;
  void* p = xalloc_realloc(s.p, size);
  XFUZZ_CHECK(p != nullptr, "realloc to %zu failed", size);
  size_t bad = check_pattern(p, s.usable, s.seed, kept);
  XFUZZ_CHECK(bad == SIZE_MAX, "realloc lost the contents at offset %zu", bad);
  g_live_bytes -= s.requested;
  adopt(index, p, size, 0, true);  // a new seed: the old contents were checked
}

// --- the planted misuse, in a child ------------------------------------------------

enum class Entry : uint8_t { kFree, kFreeSized, kFreeAlignedSized, kRealloc, kUsableSize };

const char* caller_name(Entry e) {
  switch (e) {
    case Entry::kFree: return "free()";
    case Entry::kFreeSized: return "free_sized()";
    case Entry::kFreeAlignedSized: return "free_aligned_sized()";
    case Entry::kRealloc: return "realloc()";
    case Entry::kUsableSize: return "malloc_usable_size()";
  }
  return "?";
}

void call_entry(Entry e, void* p, size_t size, size_t alignment) {
  switch (e) {
    case Entry::kFree: xalloc_free(p); break;
    case Entry::kFreeSized: xalloc_free_sized(p, size); break;
    case Entry::kFreeAlignedSized: xalloc_free_aligned_sized(p, alignment, size); break;
    case Entry::kRealloc: {
      void* q = xalloc_realloc(p, size + 1);
      // Only reached when the misuse went unnoticed.
      std::fprintf(stderr, "misuse_fuzz: realloc(%p) returned %p\n", p, q);
      break;
    }
    case Entry::kUsableSize: {
      size_t n = xalloc_usable_size(p);
      std::fprintf(stderr, "misuse_fuzz: usable_size(%p) returned %zu\n", p, n);
      break;
    }
  }
}

// One acceptable first line: "xalloc: <problem> of <addr>[ (<N>-byte class)] in <caller>".
struct Expected {
  std::vector<std::string> problems;
  const void* address = nullptr;
  std::string caller;
  size_t class_size = 0;  // the N of "(N-byte class)" when a slab block is named; 0: not checked
};

bool line_matches(const std::string& line, const Expected& e) {
  for (const std::string& problem : e.problems) {
    std::string head = "xalloc: " + problem + " of " + hex(e.address);
    if (line.compare(0, head.size(), head) != 0) continue;
    std::string rest = line.substr(head.size());
    if (rest == " in " + e.caller) return true;
    size_t n = 0;
    char tail[64] = {};
    if (std::sscanf(rest.c_str(), " (%zu-byte class) in %63[^\n]", &n, tail) == 2 && e.caller == tail &&
        (e.class_size == 0 || n == e.class_size))
      return true;
    // Blocks that are spans of their own name their kind, and their size
    // when it is known.
    for (const char* what : {"large block", "huge block"}) {
      if (rest == std::string(" (") + what + ") in " + e.caller) return true;
      std::string format = std::string(" (%zu-byte ") + what + ") in %63[^\n]";
      if (std::sscanf(rest.c_str(), format.c_str(), &n, tail) == 2 && e.caller == tail && n != 0) return true;
    }
  }
  return false;
}

std::string describe(const Expected& e) {
  std::string s;
  for (const std::string& p : e.problems)
    s += "  xalloc: " + p + " of " + hex(e.address) + "[ (N-byte class) | ([N-byte ]large block) | ([N-byte ]huge block)] in " +
         e.caller + "\n";
  if (e.class_size != 0) s += "  with N = " + std::to_string(e.class_size) + "\n";
  return s;
}

void* remote_free_thread(void* p) {
  xalloc_free(p);
  return nullptr;
}

// Runs fn in a forked child and checks it dies of SIGABRT after printing a
// first stderr line that matches `expected`.
template <typename Fn>
void expect_abort(const char* what, const Expected& expected, Fn&& fn) {
  int fds[2];
  XFUZZ_CHECK(pipe(fds) == 0, "pipe: %s", std::strerror(errno));
  std::fflush(stderr);
  pid_t pid = fork();
  XFUZZ_CHECK(pid >= 0, "fork: %s", std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    close(fds[1]);
    // libFuzzer's handlers would report the expected abort as a crash.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGALRM}) sigaction(sig, &dfl, nullptr);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGABRT);
    sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    alarm(20);
    fn();
    std::fprintf(stderr, "misuse_fuzz: the misuse went unnoticed\n");
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      err.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string first = err.substr(0, err.find('\n'));
  bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  if (g_verbose) std::fprintf(stderr, "misuse_fuzz: planted %s: %s\n", what, first.c_str());
  if (aborted && line_matches(first, expected)) return;
  std::fprintf(stderr, "misuse_fuzz: planted %s\n", what);
  if (WIFSIGNALED(status))
    std::fprintf(stderr, "  child killed by signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    std::fprintf(stderr, "  child exited with %d\n", WEXITSTATUS(status));
  std::fprintf(stderr, "  expected SIGABRT and a first line like:\n%s  child's stderr:\n%s\n", describe(expected).c_str(),
               err.c_str());
  __builtin_trap();
}

Entry draw_free_entry(Reader& r, const Slot& s) {
  switch (r.u8() % 5) {
    case 1: return s.sized ? Entry::kFreeSized : Entry::kFree;
    case 2: return s.alignment != 0 ? Entry::kFreeAlignedSized : Entry::kFree;
    case 3: return Entry::kRealloc;
    default: return Entry::kFree;
  }
}

// A live slot chosen by the input, or -1.
int pick_live(Reader& r) {
  size_t start = r.u8() % kSlots;
  for (size_t i = 0; i < kSlots; ++i) {
    size_t index = (start + i) % kSlots;
    if (g_slots[index].p != nullptr) return static_cast<int>(index);
  }
  return -1;
}

// The class named in slab-block reports: for slab blocks the usable size is
// the class size (the default build has no canary).
size_t slab_class(const Slot& s) { return s.usable <= 64 * kKiB ? s.usable : 0; }

void plant_double_free(Reader& r) {
  int index = pick_live(r);
  if (index < 0) return;
  const Slot s = g_slots[index];
  bool remote = r.u8() % 4 == 0;
  Entry second = draw_free_entry(r, s);
  // Other live slots freed in between.
  std::vector<size_t> others;
  for (size_t n = r.u8() % 9, i = 0; i < n; ++i) {
    size_t other = r.u8() % kSlots;
    bool seen = false;
    for (size_t o : others) seen = seen || o == other;
    if (static_cast<int>(other) != index && g_slots[other].p != nullptr && !seen) others.push_back(other);
  }
  Expected e;
  e.address = s.p;
  e.caller = caller_name(second);
  // Whichever the allocator can still tell: the block's free marker (slab
  // blocks) or its span's descriptor; or the memory is no longer its own
  // at all (an emptied segment or a huge mapping given back).
  if (second == Entry::kRealloc) {
    e.problems = {"realloc of a freed block", "invalid realloc (pointer into free memory)",
                  "invalid free (pointer not allocated by xalloc)"};
  } else {
    e.problems = {"double free", "invalid free (pointer into free memory)",
                  "invalid free (pointer not allocated by xalloc)"};
  }
  e.class_size = slab_class(s);
  expect_abort(remote ? "double free (first free by another thread)" : "double free", e, [&] {
    if (remote) {
      pthread_t t;
      if (pthread_create(&t, nullptr, remote_free_thread, s.p) != 0) _exit(3);
      pthread_join(t, nullptr);
    } else {
      xalloc_free(s.p);
    }
    for (size_t other : others) xalloc_free(g_slots[other].p);
    call_entry(second, s.p, s.requested, s.alignment);
  });
}

void plant_stale_realloc(Reader& r) {
  int index = pick_live(r);
  if (index < 0) return;
  const Slot s = g_slots[index];
  size_t size = valid_size(r) + 1;
  Entry second = draw_free_entry(r, s);
  if (second == Entry::kRealloc) second = Entry::kFree;
  Expected e;
  e.address = s.p;
  e.caller = caller_name(second);
  // The new block may have been carved where the old one was (then the
  // stale pointer is inside it, or is it): only moved blocks are planted.
  e.problems = {"double free", "invalid free (pointer into free memory)",
                "invalid free (pointer not allocated by xalloc)", "invalid free (not the start of a block)"};
  e.class_size = slab_class(s);
  // If the block stays where it is, it is freed once more first: the same
  // misuse (a free of a pointer that is no longer allocated).
  expect_abort("free of the old pointer after realloc moved the block", e, [&] {
    void* q = xalloc_realloc(s.p, size);
    if (q == nullptr) _exit(4);
    if (q == s.p) xalloc_free(q);
    call_entry(second, s.p, s.requested, s.alignment);
  });
}

void plant_interior_free(Reader& r) {
  int index = pick_live(r);
  if (index < 0) return;
  const Slot s = g_slots[index];
  if (s.usable < 2) return;
  size_t offset;
  switch (r.u8() % 6) {
    case 0: offset = 1; break;
    case 1: offset = 8; break;
    case 2: offset = 16 < s.usable ? 16 : 1; break;
    case 3: offset = s.usable - 1; break;
    default: offset = 1 + r.u32() % (s.usable - 1); break;
  }
  char* inner = static_cast<char*>(s.p) + offset;
  XFUZZ_CHECK(xalloc_owns(inner) == 1, "xalloc_owns(%p) == 0 inside the live block %p", inner, s.p);
  Entry entry = draw_free_entry(r, s);
  Expected e;
  e.address = inner;
  e.caller = caller_name(entry);
  e.problems = {entry == Entry::kRealloc ? "invalid realloc (not the start of a block)"
                                         : "invalid free (not the start of a block)"};
  e.class_size = slab_class(s);
  expect_abort("free of an interior pointer", e, [&] { call_entry(entry, inner, s.requested, s.alignment); });
}

void plant_foreign_free(Reader& r) {
  int local = 0;
  void* candidates[] = {
      &local,
      g_global + (r.u8() % 16) * 16,
      g_libc_block,
      static_cast<char*>(g_mapping) + (r.u8() % 256) * 16,
      reinterpret_cast<void*>(uintptr_t{16}),
      reinterpret_cast<void*>(uintptr_t{4096}),
      reinterpret_cast<void*>(uintptr_t{0x7ffffffff000}),
      reinterpret_cast<void*>(uintptr_t{0xffff800000000000}),
      reinterpret_cast<void*>(uintptr_t{0x8000000000000000}),
      reinterpret_cast<void*>(static_cast<uintptr_t>(r.u64()) & ~uintptr_t{15}),
  };
  size_t which = r.u8() % (sizeof candidates / sizeof candidates[0]);
  void* foreign = candidates[which];
  if (foreign == nullptr || xalloc_owns(foreign) != 0) return;
  Entry entry;
  switch (r.u8() % 5) {
    case 1: entry = Entry::kFreeSized; break;
    case 2: entry = Entry::kFreeAlignedSized; break;
    case 3: entry = Entry::kRealloc; break;
    case 4: entry = Entry::kUsableSize; break;
    default: entry = Entry::kFree; break;
  }
  // An address from the input may fall into one of xalloc's segments where
  // no block is live (xalloc_owns() says no for free spans and segment
  // headers): free reports that as free memory, usable_size returns 0.
  bool wild = which == sizeof candidates / sizeof candidates[0] - 1;
  if (wild && entry == Entry::kUsableSize) entry = Entry::kFree;
  Expected e;
  e.address = foreign;
  e.caller = caller_name(entry);
  e.problems = {entry == Entry::kUsableSize ? "malloc_usable_size of a pointer not allocated by xalloc"
                                            : "invalid free (pointer not allocated by xalloc)"};
  if (wild && entry == Entry::kRealloc) {
    e.problems.insert(e.problems.end(), {"invalid realloc (pointer into free memory)",
                                         "invalid realloc (not the start of a block)", "realloc of a freed block"});
  } else if (wild) {
    e.problems.insert(e.problems.end(), {"invalid free (pointer into free memory)",
                                         "invalid free (not the start of a block)", "double free"});
  }
  // The child runs on a copy of this stack: &local is a stack address there too.
  expect_abort("free of a foreign pointer", e, [&] { call_entry(entry, foreign, 16, 16); });
}

void plant(Reader& r) {
  switch (r.u8() % 4) {
    case 0: plant_double_free(r); break;
    case 1: plant_stale_realloc(r); break;
    case 2: plant_interior_free(r); break;
    case 3: plant_foreign_free(r); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  xalloc_free(xalloc_malloc(16));
  g_verbose = std::getenv("XTEST_FUZZ_VERBOSE") != nullptr;
  g_libc_block = std::malloc(100);
  g_mapping = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g_mapping == MAP_FAILED) g_mapping = nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  // A quarter of the inputs (by their first byte) plant one misuse.
  bool may_plant = r.u8() < 64;
  bool planted = false;
  for (size_t ops = 0; ops < kMaxOps && !r.done(); ++ops) {
    uint8_t op = r.u8();
    switch (op % 10) {
      case 0: case 1: case 2: case 3: op_alloc(r, op / 10); break;
      case 4: op_realloc(r); break;
      case 5: case 6: case 7: release(r.u8() % kSlots); break;
      case 8: {
        // Pointers around live blocks are recognised without aborting.
        int index = pick_live(r);
        uint32_t offset = r.u32();
        if (index >= 0) {
          const Slot& s = g_slots[index];
          XFUZZ_CHECK(xalloc_owns(s.p) == 1, "owns(%p) == 0", s.p);
          if (s.usable > 0) {
            XFUZZ_CHECK(xalloc_owns(static_cast<char*>(s.p) + offset % s.usable) == 1, "owns(inside %p) == 0", s.p);
          }
        }
        XFUZZ_CHECK(xalloc_owns(g_global) == 0, "owns(a global) != 0");
        XFUZZ_CHECK(xalloc_owns(g_libc_block) == 0, "owns(a libc block) != 0");
        break;
      }
      case 9:
        if (may_plant && !planted) {
          planted = true;
          plant(r);
        }
        break;
    }
  }
  for (size_t i = 0; i < kSlots; ++i) release(i);
  return 0;
}
