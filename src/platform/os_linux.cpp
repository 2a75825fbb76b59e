// Linux implementation of the platform layer (see os.h).
#include "platform/os.h"

#include "base/config.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace xalloc::os {
namespace {

// System calls without libc: errno stays untouched and no interposed
// wrapper (some tools hook mmap) can call back into malloc.
inline long raw_syscall(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0, long a6 = 0) {
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}

inline bool failed(long ret) { return static_cast<unsigned long>(ret) > static_cast<unsigned long>(-4096L); }

// A small file (/proc, /sys) read whole into `buf`, NUL-terminated.
bool read_small_file(const char* path, char* buf, size_t size) {
  int fd = open_read(path);
  if (fd < 0) return false;
  long n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// The decimal number that starts at `p` (0 if none).
uint64_t parse_decimal(const char* p) {
  uint64_t value = 0;
  for (; *p >= '0' && *p <= '9'; ++p) value = value * 10 + static_cast<uint64_t>(*p - '0');
  return value;
}

constexpr int kMapFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

}  // namespace

#if defined(XALLOC_SANITIZED)
// Sanitizers must see mappings come and go (ThreadSanitizer forgets the
// history of unmapped memory; with raw system calls, a range unmapped by one
// thread and mapped again by another looks like a race).
void* map_with(size_t size, void* hint, int protection, int extra_flags = 0) {
  void* p = mmap(hint, size, protection, kMapFlags | extra_flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap(void* addr, size_t size) {
  if (size != 0) munmap(addr, size);
}
#else
void* map_with(size_t size, void* hint, int protection, int extra_flags = 0) {
  long ret = raw_syscall(SYS_mmap, reinterpret_cast<long>(hint), static_cast<long>(size), protection,
                         kMapFlags | extra_flags, -1, 0);
  return failed(ret) ? nullptr : reinterpret_cast<void*>(ret);
}

void unmap(void* addr, size_t size) {
  if (size != 0) raw_syscall(SYS_munmap, reinterpret_cast<long>(addr), static_cast<long>(size));
}
#endif

void* map(size_t size, void* hint) { return map_with(size, hint, PROT_READ | PROT_WRITE); }

namespace {

void* map_aligned_with(size_t size, size_t alignment, int protection) {
  // Ask at the address where an aligned mapping would follow the last one,
  // which usually succeeds; otherwise over-map and trim the ends.
  XALLOC_STARTUP_DATA static uintptr_t next_hint = 0;
  uintptr_t hint = __atomic_load_n(&next_hint, __ATOMIC_RELAXED);
  if (hint != 0) {
    void* p = map_with(size, reinterpret_cast<void*>(hint), protection);
    if (p == nullptr) return nullptr;
    if ((reinterpret_cast<uintptr_t>(p) & (alignment - 1)) == 0) {
      __atomic_store_n(&next_hint, reinterpret_cast<uintptr_t>(p) + size, __ATOMIC_RELAXED);
      return p;
    }
    unmap(p, size);
  }
  size_t padded = size + alignment;
  if (padded < size) return nullptr;
  auto raw = reinterpret_cast<uintptr_t>(map_with(padded, nullptr, protection));
  if (raw == 0) return nullptr;
  uintptr_t aligned = (raw + alignment - 1) & ~(alignment - 1);
  unmap(reinterpret_cast<void*>(raw), aligned - raw);
  unmap(reinterpret_cast<void*>(aligned + size), raw + padded - (aligned + size));
  __atomic_store_n(&next_hint, aligned + size, __ATOMIC_RELAXED);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

void* map_aligned(size_t size, size_t alignment) { return map_aligned_with(size, alignment, PROT_READ | PROT_WRITE); }

void* reserve_aligned(size_t size, size_t alignment) { return map_aligned_with(size, alignment, PROT_NONE); }

bool commit(void* addr, size_t size) { return size == 0 || protect_read_write(addr, size); }

void decommit(void* addr, size_t size) {
  // A fresh inaccessible mapping in place of the range: its pages and their
  // charge go with the old one. (If the kernel refuses, as at the limit of
  // mappings, the pages are at least purged; they stay charged.)
  if (size == 0) return;
  if (map_with(size, addr, PROT_NONE, MAP_FIXED) == nullptr) purge(addr, size);
}

PageRange remap_read_only_zeros(void* addr, size_t size) {
  auto start = reinterpret_cast<uintptr_t>(addr);
  uintptr_t begin = round_up(start, kOsPageSize);
  uintptr_t end = (start + size) & ~(kOsPageSize - 1);
  if (end <= begin || map_with(end - begin, reinterpret_cast<void*>(begin), PROT_READ, MAP_FIXED) == nullptr) return {};
  return {begin, end};
}

namespace {

bool overcommit_is_strict() {
  long fd = raw_syscall(SYS_open, reinterpret_cast<long>("/proc/sys/vm/overcommit_memory"), O_RDONLY | O_CLOEXEC);
  if (failed(fd)) return false;
  char mode = 0;
  long got = raw_syscall(SYS_read, fd, reinterpret_cast<long>(&mode), 1);
  raw_syscall(SYS_close, fd);
  return got == 1 && mode == '2';
}

bool data_size_is_limited() {
  struct rlimit limit = {};
  if (failed(raw_syscall(SYS_prlimit64, 0, RLIMIT_DATA, 0, reinterpret_cast<long>(&limit)))) return false;
  return limit.rlim_cur != RLIM_INFINITY;
}

}  // namespace

bool writable_mappings_are_limited() { return data_size_is_limited() || overcommit_is_strict(); }

void purge(void* addr, size_t size) {
  // MADV_DONTNEED rather than MADV_FREE: the pages leave RSS at once, which
  // is what users and their monitoring measure (docs/memory.md).
  if (size != 0) raw_syscall(SYS_madvise, reinterpret_cast<long>(addr), static_cast<long>(size), MADV_DONTNEED);
}

namespace {

// Set once a kernel without MADV_POPULATE_WRITE has answered EINVAL.
XALLOC_STARTUP_DATA bool g_no_populate = false;

}  // namespace

void populate(void* addr, size_t size) {
  if (size == 0 || __atomic_load_n(&g_no_populate, __ATOMIC_RELAXED)) return;
  // Whole pages: madvise refuses a start inside one (EINVAL, which would
  // read as a kernel without the advice).
  auto start = reinterpret_cast<uintptr_t>(addr) & ~(kOsPageSize - 1);
  uintptr_t end = round_up(reinterpret_cast<uintptr_t>(addr) + size, kOsPageSize);
  long ret = raw_syscall(SYS_madvise, static_cast<long>(start), static_cast<long>(end - start), MADV_POPULATE_WRITE);
  if (ret == -EINVAL) __atomic_store_n(&g_no_populate, true, __ATOMIC_RELAXED);
}

void advise_huge_pages(void* addr, size_t size, bool use) {
  raw_syscall(SYS_madvise, reinterpret_cast<long>(addr), static_cast<long>(size),
              use ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

bool collapse_huge_pages(void* addr, size_t size) {
  constexpr long kMadvCollapse = 25;  // Linux 6.1
  // Set once the kernel has shown that it has no MADV_COLLAPSE (or never
  // allows it here): later calls cost nothing.
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed)) return false;
  long ret = raw_syscall(SYS_madvise, reinterpret_cast<long>(addr), static_cast<long>(size), kMadvCollapse);
  if (ret == -EINVAL || ret == -ENOSYS) unsupported.store(true, std::memory_order_relaxed);
  return ret == 0;  // -EAGAIN, -ENOMEM: no huge page free now
}

bool transparent_huge_pages_usable() {
  if (raw_syscall(SYS_prctl, PR_GET_THP_DISABLE, 0, 0, 0, 0) > 0) return false;
  char buf[128];
  if (!read_small_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof(buf))) return false;
  // "always [madvise] never": the bracketed word is the setting.
  return strstr(buf, "[never]") == nullptr;
}

bool page_residency(const void* addr, size_t size, uint8_t* residency) {
  return !failed(raw_syscall(SYS_mincore, reinterpret_cast<long>(addr), static_cast<long>(size),
                             reinterpret_cast<long>(residency)));
}

bool remap_in_place(void* addr, size_t old_size, size_t new_size) {
  long ret = raw_syscall(SYS_mremap, reinterpret_cast<long>(addr), static_cast<long>(old_size),
                         static_cast<long>(new_size), 0);
  return !failed(ret);
}

bool remap_to(void* addr, size_t old_size, size_t new_size, void* target) {
  long ret = raw_syscall(SYS_mremap, reinterpret_cast<long>(addr), static_cast<long>(old_size),
                         static_cast<long>(new_size), MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<long>(target));
  return !failed(ret);
}

bool protect_none(void* addr, size_t size) {
  return !failed(raw_syscall(SYS_mprotect, reinterpret_cast<long>(addr), static_cast<long>(size), PROT_NONE));
}

bool protect_read_write(void* addr, size_t size) {
  return !failed(raw_syscall(SYS_mprotect, reinterpret_cast<long>(addr), static_cast<long>(size),
                             PROT_READ | PROT_WRITE));
}

namespace {

// Not in Debian 12's headers (the kernel's uapi values).
constexpr int kMadvGuardInstall = 102;
constexpr int kMadvGuardRemove = 103;

// Whether the kernel makes lightweight guards: unknown until the first
// attempt answers.
enum GuardMarks : int { kGuardMarksUnknown, kGuardMarksWork, kGuardMarksAbsent };
int g_guard_marks = kGuardMarksUnknown;

}  // namespace

bool guard_install(void* addr, size_t size) {
  int marks = __atomic_load_n(&g_guard_marks, __ATOMIC_RELAXED);
  if (marks != kGuardMarksAbsent) {
    long ret = raw_syscall(SYS_madvise, reinterpret_cast<long>(addr), static_cast<long>(size), kMadvGuardInstall);
    if (!failed(ret)) {
      if (marks == kGuardMarksUnknown) __atomic_store_n(&g_guard_marks, kGuardMarksWork, __ATOMIC_RELAXED);
      return false;
    }
    // An older kernel answers EINVAL to the unknown advice; a newer one
    // answers the same for an mlocked range, which then alone is protected.
    if (ret == -EINVAL && marks == kGuardMarksUnknown)
      __atomic_store_n(&g_guard_marks, kGuardMarksAbsent, __ATOMIC_RELAXED);
  }
  protect_none(addr, size);
  return true;
}

void guard_marks_disable() { __atomic_store_n(&g_guard_marks, kGuardMarksAbsent, __ATOMIC_RELAXED); }

void guard_remove(void* addr, size_t size, bool protected_pages) {
  if (protected_pages) {
    protect_read_write(addr, size);
    return;
  }
  raw_syscall(SYS_madvise, reinterpret_cast<long>(addr), static_cast<long>(size), kMadvGuardRemove);
}

void futex_wait(const volatile uint32_t* word, uint32_t expected) {
  raw_syscall(SYS_futex, reinterpret_cast<long>(word), FUTEX_WAIT_PRIVATE, expected, 0);
}

void futex_wake_one(const volatile uint32_t* word) {
  raw_syscall(SYS_futex, reinterpret_cast<long>(word), FUTEX_WAKE_PRIVATE, 1);
}

void yield_cpu() { raw_syscall(SYS_sched_yield); }

uint64_t thread_id() { return static_cast<uint64_t>(raw_syscall(SYS_gettid)); }
uint64_t process_id() { return static_cast<uint64_t>(raw_syscall(SYS_getpid)); }

uint64_t monotonic_ns() {
  // clock_gettime is served by the vDSO: no system call, no allocation.
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {
enum : int { kBarrierUnknown = 0, kBarrierReady = 1, kBarrierUnavailable = 2 };
XALLOC_FORK_DATA std::atomic<int> g_barrier_state{kBarrierUnknown};
}  // namespace

bool process_wide_barrier() {
  int state = g_barrier_state.load(std::memory_order_relaxed);
  if (state == kBarrierUnknown) {
    bool registered = raw_syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    state = registered ? kBarrierReady : kBarrierUnavailable;
    g_barrier_state.store(state, std::memory_order_relaxed);
  }
  return state == kBarrierReady && raw_syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

void process_wide_barrier_reset_after_fork_child() {
  if (g_barrier_state.load(std::memory_order_relaxed) != kBarrierUnknown)
    g_barrier_state.store(kBarrierUnknown, std::memory_order_relaxed);
}

uint64_t monotonic_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000ull + static_cast<uint64_t>(ts.tv_nsec) / 1000000ull;
}

uint32_t cpu_count() {
  static std::atomic<uint32_t> cached{0};
  uint32_t count = cached.load(std::memory_order_relaxed);
  if (count != 0) return count;
  uint64_t mask[16] = {};  // 1,024 processors
  long bytes = raw_syscall(SYS_sched_getaffinity, 0, sizeof(mask), reinterpret_cast<long>(mask));
  for (long i = 0; i < bytes / 8; ++i) count += static_cast<uint32_t>(__builtin_popcountll(mask[i]));
  if (count == 0) count = 1;
  cached.store(count, std::memory_order_relaxed);
  return count;
}

void random_fill(uint64_t* values, size_t count) {
  long bytes = static_cast<long>(count * sizeof(uint64_t));
  if (raw_syscall(SYS_getrandom, reinterpret_cast<long>(values), bytes, 1 /* GRND_NONBLOCK */) == bytes) return;
  // The kernel places 16 random bytes in every process's auxiliary vector.
  uint64_t seed = 0;
  auto* at_random = reinterpret_cast<const unsigned char*>(getauxval(AT_RANDOM));
  if (at_random != nullptr) memcpy(&seed, at_random + 8, sizeof(seed));
  for (size_t i = 0; i < count; ++i) {
    seed += monotonic_ns() * 0x9E3779B97F4A7C15ull;
    values[i] = seed ^ (seed >> 29);
  }
}

void write_stderr(const char* buf, size_t len) {
  while (len > 0) {
    long n = raw_syscall(SYS_write, 2, reinterpret_cast<long>(buf), static_cast<long>(len));
    if (n == -EINTR) continue;
    if (failed(n) || n == 0) return;
    buf += n;
    len -= static_cast<size_t>(n);
  }
}

void abort_process() {
  // abort() flushes stdio, which may allocate; raise SIGABRT directly and
  // make sure nothing catches it before falling back to exit_group.
  raw_syscall(SYS_tgkill, raw_syscall(SYS_getpid), raw_syscall(SYS_gettid), SIGABRT);
  struct sigaction_raw {
    void* handler;
    unsigned long flags;
    void* restorer;
    unsigned long mask;
  } dfl = {reinterpret_cast<void*>(SIG_DFL), 0, nullptr, 0};
  raw_syscall(SYS_rt_sigaction, SIGABRT, reinterpret_cast<long>(&dfl), 0, 8);
  unsigned long unblock = 1ul << (SIGABRT - 1);
  raw_syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, reinterpret_cast<long>(&unblock), 0, 8);
  raw_syscall(SYS_tgkill, raw_syscall(SYS_getpid), raw_syscall(SYS_gettid), SIGABRT);
  raw_syscall(SYS_exit_group, 134);
  __builtin_unreachable();
}

int open_read(const char* path) {
  long fd = raw_syscall(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_RDONLY | O_CLOEXEC);
  return failed(fd) ? -1 : static_cast<int>(fd);
}

int open_write_new(const char* path) {
  long fd = raw_syscall(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        0644);
  return failed(fd) ? -1 : static_cast<int>(fd);
}

bool rename_file(const char* from, const char* to) {
  return !failed(raw_syscall(SYS_renameat, AT_FDCWD, reinterpret_cast<long>(from), AT_FDCWD,
                             reinterpret_cast<long>(to)));
}

void remove_file(const char* path) { raw_syscall(SYS_unlinkat, AT_FDCWD, reinterpret_cast<long>(path), 0); }

int duplicate_fd(int fd, int lowest) {
  long copy = raw_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, lowest);
  return failed(copy) ? -1 : static_cast<int>(copy);
}

bool file_identity(int fd, FileIdentity* out) {
  struct stat st;
  if (failed(raw_syscall(SYS_fstat, fd, reinterpret_cast<long>(&st)))) return false;
  out->device = static_cast<uint64_t>(st.st_dev);
  out->inode = static_cast<uint64_t>(st.st_ino);
  return true;
}

long read(int fd, void* buf, size_t len) {
  for (;;) {
    long n = raw_syscall(SYS_read, fd, reinterpret_cast<long>(buf), static_cast<long>(len));
    if (n == -EINTR) continue;
    return failed(n) ? -1 : n;
  }
}

bool write_all(int fd, const char* buf, size_t len) {
  while (len > 0) {
    long n = raw_syscall(SYS_write, fd, reinterpret_cast<long>(buf), static_cast<long>(len));
    if (n == -EINTR) continue;
    if (failed(n) || n == 0) return false;
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

void close(int fd) { raw_syscall(SYS_close, fd); }

const void* map_file(const char* path, size_t* size) {
  int fd = open_read(path);
  if (fd < 0) return nullptr;
  struct stat st;
  long ok = raw_syscall(SYS_fstat, fd, reinterpret_cast<long>(&st));
  long addr = failed(ok) || st.st_size <= 0
                  ? -EINVAL
                  : raw_syscall(SYS_mmap, 0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (failed(addr)) return nullptr;
  *size = static_cast<size_t>(st.st_size);
  return reinterpret_cast<const void*>(addr);
}

const void* program_headers(size_t* count) {
  *count = getauxval(AT_PHNUM);
  return reinterpret_cast<const void*>(getauxval(AT_PHDR));
}

bool executable_path(char* buf, size_t size) {
  long n = raw_syscall(SYS_readlink, reinterpret_cast<long>("/proc/self/exe"), reinterpret_cast<long>(buf),
                       static_cast<long>(size - 1));
  if (failed(n) || n == 0) return false;
  buf[n] = '\0';
  return true;
}

uint64_t peak_resident_bytes() {
  char buf[2048];
  if (!read_small_file("/proc/self/status", buf, sizeof(buf))) return 0;
  const char* p = strstr(buf, "VmHWM:");
  if (p == nullptr) return 0;
  for (p += 6; *p == ' ' || *p == '\t'; ++p) {
  }
  return parse_decimal(p) << 10;
}

uint64_t resident_bytes_in(uintptr_t start, size_t bytes) {
  constexpr size_t kChunkPages = 512;
  unsigned char vec[kChunkPages];
  size_t pages = (bytes + kOsPageSize - 1) / kOsPageSize;
  uint64_t resident = 0;
  for (size_t done = 0; done < pages; done += kChunkPages) {
    size_t count = pages - done < kChunkPages ? pages - done : kChunkPages;
    if (mincore(reinterpret_cast<void*>(start + done * kOsPageSize), count * kOsPageSize, vec) != 0) continue;
    for (size_t i = 0; i < count; ++i) resident += vec[i] & 1;
  }
  return resident * kOsPageSize;
}

uint64_t resident_bytes() {
  // The second field of /proc/self/statm, in pages.
  char buf[128];
  if (!read_small_file("/proc/self/statm", buf, sizeof(buf))) return 0;
  const char* p = buf;
  while (*p != '\0' && *p != ' ') ++p;
  return parse_decimal(*p == ' ' ? p + 1 : p) * kOsPageSize;
}

}  // namespace xalloc::os
