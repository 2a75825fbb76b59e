// A C++ program that links libxalloc.a: the archive's malloc and operator
// new replace the C library's and the C++ runtime's inside the executable
// itself (no libxalloc.so, no LD_PRELOAD). Exits 1 unless new, malloc and
// the C library's own allocations are xalloc's.
#include <dlfcn.h>
#include <xalloc/xalloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(const void* p, const char* what) {
  if (p == nullptr || xalloc_owns(p) != 1) {
    std::fprintf(stderr, "static_override: %s (%p) was not allocated by xalloc\n", what, p);
    ++failures;
  }
}

// The object file a function's code lies in.
const char* object_of(void* code) {
  Dl_info info;
  if (dladdr(code, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

int marker() { return 0; }

}  // namespace

int main() {
  int* number = new int(42);
  check(number, "new int");
  std::vector<double> values(1000, 1.5);
  check(values.data(), "std::vector<double>(1000)");
  std::string text(300, 's');
  check(text.data(), "std::string(300)");
  void* block = std::malloc(64);
  if (block != nullptr) std::memset(block, 0, 64);
  check(block, "malloc(64)");
  char* copy = strdup("allocated inside the C library");
  check(copy, "strdup()");
  std::free(copy);
  std::free(block);
  delete number;

  // Static linking: xalloc's code is part of the executable.
  const char* xalloc_object = object_of(reinterpret_cast<void*>(&xalloc_owns));
  const char* main_object = object_of(reinterpret_cast<void*>(&marker));
  if (std::strcmp(xalloc_object, main_object) != 0) {
    std::fprintf(stderr, "static_override: xalloc_owns comes from %s, not from the executable (%s)\n", xalloc_object,
                 main_object);
    ++failures;
  }

  if (failures != 0) return 1;
  std::printf("static_override: ok: new, std::vector, std::string, malloc and strdup are served by xalloc %s, "
              "linked into the executable\n",
              xalloc_version());
  return 0;
}
