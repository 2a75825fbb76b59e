// Platform layer: everything xalloc asks of the operating system.
//
// The rest of the allocator reaches Linux only through these functions.
// They issue raw system calls (no libc wrappers), so they never allocate,
// never take a libc lock and never touch errno: malloc must be callable
// from anywhere, including from inside libc and from interposed mmap hooks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xalloc::os {

// Maps `size` bytes of fresh, zeroed, read-write memory aligned to
// `alignment` (a power of two, at least the OS page size). Returns nullptr
// when the OS refuses.
void* map_aligned(size_t size, size_t alignment);
void* map(size_t size, void* hint = nullptr);
void unmap(void* addr, size_t size);

// Gives the physical pages back; the range stays mapped and reads as zero.
void purge(void* addr, size_t size);

// Commit on demand, for processes whose writable private mappings count
// against a limit as soon as they are mapped: address space is reserved
// inaccessible, which is not charged, and made read-write as it is used.
// True when they do: the kernel never overcommits (vm.overcommit_memory=2,
// where MAP_NORESERVE is ignored), or the process has a data size limit
// (RLIMIT_DATA, `ulimit -d`, which counts them since Linux 4.7).
bool writable_mappings_are_limited();
// Like map_aligned, but inaccessible until committed.
void* reserve_aligned(size_t size, size_t alignment);
// Makes reserved (or decommitted) pages read-write, zeroed; false when the
// kernel refuses, as at the commit limit.
bool commit(void* addr, size_t size);
// Gives the pages back and makes them inaccessible again, which also takes
// them off the commit charge (purge and mprotect would not).
void decommit(void* addr, size_t size);
// Replaces the whole pages inside [addr, addr + size) - of a global
// array, say - with read-only zero pages, which are not charged; commit()
// makes them writable. Returns those pages (none, begin == end, if the
// kernel refused).
struct PageRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
};
PageRange remap_read_only_zeros(void* addr, size_t size);

// Makes the pages that [addr, addr + size) touches, mapped read-write and
// about to be written, resident in one system call (MADV_POPULATE_WRITE, Linux
// 5.14): a first touch costs a page fault each, which on a virtual machine
// takes several times the call (measured on the 2-vCPU AMD one: a fault
// 7 us, the call for one page 2 us, 0.35 us a page more). Where the kernel
// has no such advice nothing is done and the pages fault in as they are
// touched.
void populate(void* addr, size_t size);

// Transparent huge pages for [addr, addr + size): asks for them (`use`)
// or keeps the kernel from using them, whatever its default.
void advise_huge_pages(void* addr, size_t size, bool use);
// Backs [addr, addr + size) (2 MiB aligned) with huge pages now, copying
// what is resident (MADV_COLLAPSE, Linux 6.1). False when it did not:
// the kernel cannot at the moment (no free huge page), or has no such
// call, in which case later calls return false at once.
bool collapse_huge_pages(void* addr, size_t size);
// Whether the kernel may back this process's memory with transparent huge
// pages at all: THP not "never" (/sys/kernel/mm/transparent_hugepage), and
// not disabled for the process (prctl PR_SET_THP_DISABLE).
bool transparent_huge_pages_usable();
// Sums, over the mappings of /proc/self/smaps whose start `owned` accepts,
// the resident bytes and those on huge pages (AnonHugePages). False when
// the file cannot be read. Slow (reads every mapping): statistics only.
struct HugePageCoverage {
  uint64_t resident = 0;
  uint64_t on_huge_pages = 0;
};
bool huge_page_coverage(bool (*owned)(uintptr_t start), HugePageCoverage* out);

// Fills `residency` with one byte per page of [addr, addr + size) (page
// aligned, at most kResidencyPages pages), bit 0 set where the page is
// resident. False if the kernel refuses.
constexpr size_t kResidencyPages = 2048;
bool page_residency(const void* addr, size_t size, uint8_t* residency);

// Resizes a mapping in place (no move). Returns false if it cannot.
bool remap_in_place(void* addr, size_t old_size, size_t new_size);
// Moves a mapping to `target` (which must be a mapping of new_size bytes
// that is replaced), growing or shrinking it. Returns false on failure.
bool remap_to(void* addr, size_t old_size, size_t new_size, void* target);

bool protect_none(void* addr, size_t size);
bool protect_read_write(void* addr, size_t size);

// Guard pages: any access to [addr, addr + size) faults; what the pages held
// is lost. Lightweight guards (MADV_GUARD_INSTALL, Linux 6.13) are marks in
// the page tables: no mapping is split, the mmap lock is only read, and they
// survive a purge and a move by mremap. Where the kernel has none (or
// refuses one, as in an mlocked range) the pages are made PROT_NONE instead,
// and guard_install returns true: the caller passes that to guard_remove.
bool guard_install(void* addr, size_t size);
// Makes a guard ordinary read-write memory again (reading as zero).
void guard_remove(void* addr, size_t size, bool protected_pages);
// From now on, as on a kernel without lightweight guards (for tests).
void guard_marks_disable();

// Lets another thread run.
void yield_cpu();

// Futex-based waiting on a 32-bit word (private to the process).
void futex_wait(const volatile uint32_t* word, uint32_t expected);
void futex_wake_one(const volatile uint32_t* word);

// A full memory barrier on every processor that runs a thread of this
// process, issued from one thread (membarrier's private expedited
// command): the other side of an asymmetric fence, whose common side
// needs only the compiler's ordering. False when the kernel cannot (the
// first call registers the process; before Linux 4.14, or forbidden by a
// seccomp filter, it never can).
bool process_wide_barrier();
// The registration does not survive fork().
void process_wide_barrier_reset_after_fork_child();

uint64_t thread_id();
uint64_t process_id();
uint64_t monotonic_ms();
uint64_t monotonic_ns();

// The processors the process may run on (its affinity mask at the first
// call; 1 if unknown).
uint32_t cpu_count();

// `count` random 64-bit values from the kernel in one system call
// (getrandom, falling back to AT_RANDOM mixed with the clock).
void random_fill(uint64_t* values, size_t count);


// Writes all of buf to standard error.
void write_stderr(const char* buf, size_t len);

// Files, through raw system calls: -1 (or false) on failure.
int open_read(const char* path);
int open_write_new(const char* path);  // created or truncated, mode 0644
// Replaces `to` by `from` in one step: a reader sees the old file or the
// whole new one.
bool rename_file(const char* from, const char* to);
void remove_file(const char* path);
// A duplicate of `fd` numbered `lowest` or above, closed on exec; -1 if
// none (`fd` not open, or `lowest` beyond the process's limit).
int duplicate_fd(int fd, int lowest);
// The file an open descriptor refers to (device and inode); false when it
// is not open.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
};
bool file_identity(int fd, FileIdentity* out);
long read(int fd, void* buf, size_t len);
bool write_all(int fd, const char* buf, size_t len);
void close(int fd);
// The whole of a file mapped read-only (null if it cannot be); *size gets
// its length.
const void* map_file(const char* path, size_t* size);
// The running executable's program headers as the kernel loaded them (the
// auxiliary vector's AT_PHDR, AT_PHNUM); null if unknown.
const void* program_headers(size_t* count);
// The path of the running executable, NUL-terminated; false if unknown.
bool executable_path(char* buf, size_t size);
// Bytes of the process resident in memory (/proc/self/statm); 0 if unknown.
uint64_t resident_bytes();
// The process's peak resident memory (VmHWM of /proc/self/status); 0 if unknown.
uint64_t peak_resident_bytes();
// Bytes of the pages of [start, start + bytes) resident now (mincore; start
// page-aligned); 0 for memory that is not mapped. A system call per 2 MiB.
uint64_t resident_bytes_in(uintptr_t start, size_t bytes);

// Spins politely while another thread finishes a short step.
inline void cpu_relax() { __builtin_ia32_pause(); }
void sleep_ms(uint64_t ms);
// A detached thread named `name`, with a stack of `stack_bytes` (small:
// the program's limit for thread stacks could be any size) and every
// signal blocked (it must not take the program's signals). False if none.
bool start_thread(void* (*main)(void*), const char* name, size_t stack_bytes = 64 * 1024);
// A per-thread slot whose destructor runs at thread exit with the value
// last set (pthread keys). False when none is left.
bool thread_exit_key_create(void (*destructor)(void*));
void thread_exit_key_set(void* value);
// Handlers run around fork() (pthread_atfork).
void at_fork(void (*prepare)(), void (*parent)(), void (*child)());
// Runs handler(sig) on signal `sig` (SA_RESTART).
void on_signal(int sig, void (*handler)(int));

[[noreturn]] void abort_process();

}  // namespace xalloc::os
