// Linux implementation of the platform layer's threads, keys, fork
// handlers and signals (see os.h): what needs libc's pthread state.
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cstring>

#include "platform/os.h"

namespace xalloc::os {

namespace {
pthread_key_t g_exit_key;
}  // namespace

void sleep_ms(uint64_t ms) {
  struct timespec pause = {static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000};
  while (nanosleep(&pause, &pause) != 0) {
  }
}

bool start_thread(void* (*main)(void*), const char* name, size_t stack_bytes) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, stack_bytes);
  bool started = pthread_create(&thread, &attr, main, nullptr) == 0;
  if (started) pthread_setname_np(thread, name);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return started;
}

bool thread_exit_key_create(void (*destructor)(void*)) { return pthread_key_create(&g_exit_key, destructor) == 0; }

void thread_exit_key_set(void* value) { pthread_setspecific(g_exit_key, value); }

void at_fork(void (*prepare)(), void (*parent)(), void (*child)()) { pthread_atfork(prepare, parent, child); }

void on_signal(int sig, void (*handler)(int)) {
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = handler;
  action.sa_flags = SA_RESTART;
  sigaction(sig, &action, nullptr);
}

}  // namespace xalloc::os
