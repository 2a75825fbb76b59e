// A C++ program statically linked with libxalloc.a (built by e2e.sh): its
// operator new and malloc are xalloc's.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "xalloc/xalloc.h"

static const void* launder(const void* p) {
  __asm__ volatile("" : "+r"(p));
  return p;
}

static std::map<int, std::string>* g_static = new std::map<int, std::string>{{1, std::string(100, 'x')}};

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "static program: FAILED: %s\n", what);
      ++failures;
    }
  };
  int* i = new int(42);
  check(xalloc_owns(launder(i)) == 1, "xalloc_owns(new int)");
  delete i;
  void* m = std::malloc(100);
  check(xalloc_owns(launder(m)) == 1, "malloc");
  std::free(m);
  char* s = strdup("x");
  check(xalloc_owns(launder(s)) == 1, "strdup");
  std::free(s);
  check(xalloc_owns(launder(g_static)) == 1, "allocation during static initialisation");
  std::vector<std::string> v(1000, std::string(64, 'v'));
  check(xalloc_owns(launder(v[500].data())) == 1, "std::string in a vector");
  int* from_thread = nullptr;
  std::thread t([&] { from_thread = new int[100]; });
  t.join();
  check(xalloc_owns(launder(from_thread)) == 1, "new[] in a thread");
  delete[] from_thread;
  if (failures != 0) return 1;
  std::printf("static program: ok\n");
  return 0;
}
