// Platform layer: guard pages (the secure build's), made either way the
// platform knows: page-table marks where the kernel has them, PROT_NONE
// where it does not.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "platform/os.h"

namespace {

constexpr size_t kPage = 4096;

// True if writing one byte at `address` faults, tried in a child process:
// the child does not get to exit normally (a sanitizer's handler turns the
// SIGSEGV into a report and an abort).
bool write_faults(char* address) {
  pid_t pid = fork();
  if (pid == 0) {
    *reinterpret_cast<volatile char*>(address) = 'x';
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A guard's life: it faults, leaves its neighbours alone, outlives a
// purge, and once removed is ordinary memory again. Returns what went
// wrong ("" if nothing); `made_by_protection` says how the guard was made.
std::string guard_life(bool* made_by_protection) {
  auto* memory = static_cast<char*>(xalloc::os::map(8 * kPage));
  if (memory == nullptr) return "no mapping";
  memset(memory, 'a', 8 * kPage);
  char* guard = memory + 3 * kPage;
  *made_by_protection = xalloc::os::guard_install(guard, kPage);
  std::string wrong;
  if (!write_faults(guard)) wrong += "the guard page is writable; ";
  if (!write_faults(guard + kPage - 1)) wrong += "the guard page's last byte is writable; ";
  if (write_faults(guard - 1) || write_faults(guard + kPage)) wrong += "a neighbour faults; ";
  if (guard[-1] != 'a' || guard[kPage] != 'a') wrong += "a neighbour lost its contents; ";
  xalloc::os::purge(memory, 8 * kPage);
  if (!write_faults(guard)) wrong += "a purge took the guard down; ";
  xalloc::os::guard_remove(guard, kPage, *made_by_protection);
  if (write_faults(guard)) wrong += "the removed guard still faults; ";
  guard[0] = 'b';
  if (guard[0] != 'b') wrong += "the removed guard does not keep a write; ";
  xalloc::os::unmap(memory, 8 * kPage);
  return wrong;
}

}  // namespace

TEST(Platform, GuardPageFaultsUntilRemoved) {
  bool made_by_protection = false;
  EXPECT_EQ(guard_life(&made_by_protection), "");
  std::printf("guard made by %s\n", made_by_protection ? "PROT_NONE (no lightweight guards)" : "page-table marks");
}

// The way older kernels get (and the fallback for mlocked memory), tried
// in a child: the switch holds for the rest of the process.
TEST(Platform, GuardPageByProtectionFaultsUntilRemoved) {
  pid_t pid = fork();
  if (pid == 0) {
    xalloc::os::guard_marks_disable();
    bool made_by_protection = false;
    std::string wrong = guard_life(&made_by_protection);
    if (!made_by_protection) wrong += "made by marks after they were disabled";
    if (!wrong.empty()) std::fprintf(stderr, "%s\n", wrong.c_str());
    _exit(wrong.empty() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}
