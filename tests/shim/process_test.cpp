// Process-level events in a program linked with libxalloc.so: static
// constructors that allocate before main, fork() while other threads
// allocate, thread-exit hooks that allocate, dlopen/dlclose of a library
// that allocates, many threads with cross-thread frees through plain malloc.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xalloc/xalloc.h"

namespace {
// xalloc_owns through a laundered pointer (see xtest::launder_ptr).
__attribute__((always_inline)) inline int owned(const void* p) { return xalloc_owns(xtest::launder_ptr(p)); }
}  // namespace

namespace {

// --- allocations before main ------------------------------------------------

void* g_ctor_block = nullptr;
char* g_ctor_string = nullptr;

// Runs before the C++ static constructors of this file.
__attribute__((constructor(101))) void early_constructor() {
  g_ctor_block = std::malloc(1000);
  std::memset(g_ctor_block, 0x42, 1000);
  g_ctor_string = strdup("allocated in a constructor before main");
}

struct StaticUser {
  std::vector<std::string> strings;
  int* number;
  void* aligned = nullptr;
  StaticUser() : number(new int(7)) {
    for (int i = 0; i < 200; ++i) strings.push_back(std::string(static_cast<size_t>(i) + 30, 'z'));
    aligned = std::aligned_alloc(4096, 4096);
  }
  ~StaticUser() {
    delete number;
    std::free(aligned);
  }
};

StaticUser g_static_user;

}  // namespace

TEST(BeforeMain, StaticConstructorAllocationsAreXallocs) {
  ASSERT_NE(g_ctor_block, nullptr);
  EXPECT_EQ(owned(g_ctor_block), 1);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<unsigned char*>(g_ctor_block)[i], 0x42);
  EXPECT_EQ(owned(g_ctor_string), 1);
  EXPECT_STREQ(g_ctor_string, "allocated in a constructor before main");
  EXPECT_EQ(owned(g_static_user.number), 1);
  EXPECT_EQ(*g_static_user.number, 7);
  EXPECT_EQ(owned(g_static_user.strings[150].data()), 1);
  EXPECT_EQ(g_static_user.strings[150], std::string(180, 'z'));
  EXPECT_EQ(owned(g_static_user.aligned), 1);
  EXPECT_TRUE(xtest::is_aligned(g_static_user.aligned, 4096));
  // Blocks from before main can be freed and reallocated normally.
  g_ctor_string = static_cast<char*>(std::realloc(g_ctor_string, 100000));
  ASSERT_NE(g_ctor_string, nullptr);
  EXPECT_STREQ(g_ctor_string, "allocated in a constructor before main");
  std::free(g_ctor_string);
  g_ctor_string = nullptr;
}

// --- fork ---------------------------------------------------------------------

namespace {

// Background threads that allocate and free all the time (small, large,
// huge), passing blocks between them through shared slots.
class Allocators {
 public:
  explicit Allocators(unsigned n) : slots_(64) {
    for (auto& s : slots_) s.store(nullptr);
    for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this, i] { run(i); });
  }
  ~Allocators() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    for (auto& s : slots_) std::free(s.load());
  }
  // A block some thread allocated (or null); the caller owns it.
  void* steal() { return slots_[0].exchange(nullptr); }
  size_t ops() const { return ops_.load(); }

 private:
  void run(unsigned id) {
    xtest::Rng rng(id + 1);
    while (!stop_) {
      size_t size = rng.below(200) == 0 ? (size_t{17} << 20) : rng.size_mix();
      auto* p = static_cast<char*>(std::malloc(size));
      if (p == nullptr) continue;
      p[0] = 1;
      p[size - 1] = 2;
      if (rng.below(2) == 0) p = static_cast<char*>(std::realloc(p, rng.size_mix()));
      void* old = slots_[rng.below(slots_.size())].exchange(p);
      std::free(old);
      ops_++;
    }
  }
  std::vector<std::atomic<void*>> slots_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> ops_{0};
};

// The child's work after fork: allocate and free every kind of block, free
// a block another thread of the parent allocated, start a thread.
int child_work(void* inherited) {
  alarm(30);
  std::free(inherited);
  std::vector<void*> blocks;
  for (int i = 0; i < 2000; ++i) blocks.push_back(std::malloc(static_cast<size_t>(i % 500) + 1));
  blocks.push_back(std::malloc(200000));
  blocks.push_back(std::malloc(size_t{20} << 20));
  blocks.push_back(std::calloc(1, size_t{18} << 20));
  for (void* p : blocks) {
    if (p == nullptr) return 3;
    std::free(p);
  }
  std::string s(5000, 'c');
  std::atomic<int> ok{0};
  std::thread t([&] {
    void* p = std::malloc(64);
    void* q = std::malloc(1 << 20);
    ok = p != nullptr && q != nullptr;
    std::free(p);
    std::free(q);
  });
  t.join();
  return ok.load() == 1 ? 0 : 4;
}

}  // namespace

TEST(Fork, WhileOtherThreadsAllocate) {
  Allocators background(4);
  const int kForks = static_cast<int>(xtest::scaled(40, 4));
  for (int i = 0; i < kForks; ++i) {
    void* inherited = background.steal();
    std::fflush(nullptr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = child_work(inherited);
      if (i % 2 == 0) _exit(rc);
      std::exit(rc);  // also runs exit handlers and library destructors
    }
    std::free(inherited);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "fork " << i << ": child " << (WIFSIGNALED(status) ? "killed by signal " : "exited with ")
        << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  EXPECT_GT(background.ops(), 0u);
}

TEST(Fork, FromASecondaryThread) {
  Allocators background(2);
  std::atomic<int> failures{0};
  std::thread forker([&] {
    for (int i = 0; i < 10; ++i) {
      std::fflush(nullptr);
      pid_t pid = fork();
      if (pid == 0) _exit(child_work(nullptr));
      int status = 0;
      waitpid(pid, &status, 0);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failures++;
    }
  });
  // Meanwhile the main thread allocates too.
  for (int i = 0; i < 20000; ++i) std::free(xtest::launder_ptr(std::malloc(static_cast<size_t>(i % 3000) + 1)));
  forker.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Fork, ChildOfChild) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    void* p = std::malloc(100);
    pid_t grandchild = fork();
    if (grandchild == 0) _exit(child_work(p));
    std::free(p);
    int status = 0;
    waitpid(grandchild, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 9);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// --- thread-exit hooks ------------------------------------------------------

namespace {

pthread_key_t g_key_a, g_key_b;
std::atomic<int> g_hook_errors{0};
std::atomic<int> g_hook_runs{0};

void destroy_strings(void* value) {
  auto* v = static_cast<std::vector<std::string>*>(value);
  if (v->size() != 20 || (*v)[19] != std::string(60, 's')) g_hook_errors++;
  delete v;
  // Allocate and free during thread exit.
  std::string tmp(3000, 't');
  char* c = strdup(tmp.c_str());
  std::free(c);
  g_hook_runs++;
}

void destroy_and_rearm(void* value) {
  auto round = reinterpret_cast<uintptr_t>(value) & 1;
  std::free(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(value) & ~uintptr_t{1}));
  if (round == 0) {
    // Set the key again: destructors run another round.
    void* again = std::malloc(128);
    pthread_setspecific(g_key_b, reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(again) | 1));
  }
  g_hook_runs++;
}

struct TlsStrings {
  std::vector<std::string> v;
  ~TlsStrings() {
    for (const auto& s : v)
      if (s.size() != 100) g_hook_errors++;
  }
};

thread_local TlsStrings t_strings;

}  // namespace

TEST(ThreadExit, DestructorsThatAllocate) {
  ASSERT_EQ(pthread_key_create(&g_key_a, destroy_strings), 0);
  ASSERT_EQ(pthread_key_create(&g_key_b, destroy_and_rearm), 0);
  g_hook_errors = 0;
  g_hook_runs = 0;
  const int kThreads = static_cast<int>(xtest::scaled(800, 4));
  xalloc_stats_t warm{};
  for (int done = 0; done < kThreads;) {
    std::vector<std::thread> batch;
    for (int i = 0; i < 4; ++i, ++done) {
      batch.emplace_back([] {
        auto* v = new std::vector<std::string>(20, std::string(60, 's'));
        pthread_setspecific(g_key_a, v);
        pthread_setspecific(g_key_b, std::malloc(64));
        for (int j = 0; j < 10; ++j) t_strings.v.push_back(std::string(100, 'u'));
      });
    }
    for (auto& t : batch) t.join();
    if (done == 100) {
      malloc_trim(0);
      xalloc_get_stats(&warm);
    }
  }
  malloc_trim(0);
  xalloc_stats_t after;
  xalloc_get_stats(&after);
  EXPECT_EQ(g_hook_errors.load(), 0);
  EXPECT_EQ(g_hook_runs.load(), kThreads * 3);
  EXPECT_LE(after.committed, warm.committed + (size_t{4} << 20));
  EXPECT_LE(after.threads, warm.threads + 8);
  pthread_key_delete(g_key_a);
  pthread_key_delete(g_key_b);
}

TEST(ThreadExit, DetachedThreadsExitWhileMainAllocates) {
  std::atomic<int> running{0};
  for (int i = 0; i < 200; ++i) {
    running++;
    std::thread([&running] {
      std::vector<std::string> v(50, std::string(80, 'd'));
      std::free(xtest::launder_ptr(std::malloc(100000)));
      running--;
    }).detach();
    std::free(xtest::launder_ptr(std::malloc(static_cast<size_t>(i) * 10 + 1)));
  }
  while (running.load() != 0) std::this_thread::yield();
}

// --- dlopen -----------------------------------------------------------------

TEST(Dlopen, LibraryThatAllocatesInConstructorsAndFunctions) {
  std::vector<char*> strings;
  std::vector<std::vector<int>*> vectors;
  for (int round = 0; round < 30; ++round) {
    void* lib = dlopen(XTEST_DL_LIB, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << dlerror();
    auto make_string = reinterpret_cast<char* (*)(int)>(dlsym(lib, "dl_make_string"));
    auto make_vector = reinterpret_cast<std::vector<int>* (*)(int)>(dlsym(lib, "dl_make_vector"));
    auto state_block = reinterpret_cast<const void* (*)()>(dlsym(lib, "dl_state_block"));
    auto lib_free = reinterpret_cast<void (*)(void*)>(dlsym(lib, "dl_free"));
    ASSERT_TRUE(make_string && make_vector && state_block && lib_free);
    EXPECT_EQ(owned(state_block()), 1) << "the library's constructor allocated elsewhere";
    char* s = make_string(round);
    EXPECT_EQ(owned(s), 1);
    strings.push_back(s);
    vectors.push_back(make_vector(round + 1));
    // A block allocated here and freed by the library.
    lib_free(std::malloc(333));
    ASSERT_EQ(dlclose(lib), 0);
  }
  // Blocks that outlived the library.
  for (size_t i = 0; i < strings.size(); ++i) {
    EXPECT_EQ(std::string(strings[i]), "library string number " + std::to_string(i) + "/library string number 1");
    std::free(strings[i]);
    EXPECT_EQ(vectors[i]->size(), i + 1);
    delete vectors[i];
  }
}

TEST(Dlopen, FromSeveralThreads) {
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&errors, t] {
      for (int round = 0; round < 10; ++round) {
        void* lib = dlopen(XTEST_DL_LIB, RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) {
          errors++;
          continue;
        }
        auto make_string = reinterpret_cast<char* (*)(int)>(dlsym(lib, "dl_make_string"));
        char* s = make_string(t);
        if (owned(s) != 1) errors++;
        std::free(s);
        dlclose(lib);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
}

// --- plain malloc across threads --------------------------------------------

TEST(Threads, CrossThreadFreesThroughMalloc) {
  const int kThreads = 8;
  const size_t kOps = xtest::scaled(30000);
  std::vector<std::atomic<void*>> slots(512);
  for (auto& s : slots) s.store(nullptr);
  std::atomic<size_t> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      xtest::Rng rng(static_cast<uint64_t>(t) + 9);
      for (size_t i = 0; i < kOps; ++i) {
        size_t size = 16 + rng.below(rng.below(20) == 0 ? 100000 : 500);
        auto* p = static_cast<uint32_t*>(std::malloc(size));
        p[0] = static_cast<uint32_t>(size);
        p[1] = static_cast<uint32_t>(size * 2654435761u);
        auto* old = static_cast<uint32_t*>(slots[rng.below(slots.size())].exchange(p));
        if (old != nullptr) {
          if (old[1] != static_cast<uint32_t>(old[0] * 2654435761u) || malloc_usable_size(old) < old[0]) bad++;
          std::free(old);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : slots) std::free(s.load());
  EXPECT_EQ(bad.load(), 0u);
}
