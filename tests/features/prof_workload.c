/* A program with a known allocation pattern, for the heap profiler and leak
 * report tests (features_test.cpp), run under LD_PRELOAD=libxalloc.so with
 * XALLOC_PROF / XALLOC_LEAKS. Built with -O1 -g -fno-builtin, every
 * function kept out of line, so that each allocation site is a frame of
 * its own and no malloc is optimised away.
 *
 *   keep_small    100,000 blocks of 1000 bytes    100,000,000 bytes live at exit
 *   keep_medium       500 blocks of 100,000 bytes  50,000,000 bytes live at exit
 *   keep_mid       16,000 blocks of 5000 bytes     80,000,000 bytes live at exit
 *   churn           2,000 blocks of 100,000 bytes, each freed at once (200 MB, none live)
 *
 * `prof_workload` runs them on the main thread, `prof_workload thread` on a
 * second thread (the main thread allocating nothing itself), and
 * `prof_workload large-thread` only keep_medium, on a second thread that
 * allocates nothing else (after the main thread allocated a small block).
 * `prof_workload realloc` only grows 4 buffers by realloc, 1.5x at a time,
 * to 24 MiB each (96 MiB live at exit, through large and huge blocks).
 * `prof_workload double-free` (run with every allocation sampled) frees
 * sampled blocks, whose spans the profiler keeps for reuse, then frees one
 * of them again: the second free must be reported. `prof_workload fork`
 * (every allocation sampled) forks 200 times while a second thread samples
 * without pause; each child allocates and frees a (sampled) block: a child
 * that inherited the profiler's lock held would wait for it forever. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL_COUNT 100000
#define SMALL_SIZE 1000
#define MEDIUM_COUNT 500
#define MEDIUM_SIZE 100000
#define MID_COUNT 16000
#define MID_SIZE 5000
#define CHURN_COUNT 2000
#define CHURN_SIZE 100000

static void* volatile g_sink;

__attribute__((noinline)) void keep_small(void** blocks) {
  for (int i = 0; i < SMALL_COUNT; ++i) {
    blocks[i] = malloc(SMALL_SIZE);
    ((char*)blocks[i])[0] = (char)i;
  }
}

__attribute__((noinline)) void keep_medium(void** blocks) {
  for (int i = 0; i < MEDIUM_COUNT; ++i) {
    blocks[i] = malloc(MEDIUM_SIZE);
    ((char*)blocks[i])[0] = (char)i;
  }
}

__attribute__((noinline)) void keep_mid(void** blocks) {
  for (int i = 0; i < MID_COUNT; ++i) {
    blocks[i] = malloc(MID_SIZE);
    ((char*)blocks[i])[0] = (char)i;
  }
}

__attribute__((noinline)) void churn(void) {
  for (int i = 0; i < CHURN_COUNT; ++i) {
    char* p = malloc(CHURN_SIZE);
    p[0] = (char)i;
    g_sink = p;
    free(p);
  }
}

__attribute__((noinline)) void* workload(void* arg) {
  (void)arg;
  /* The pointer arrays themselves are small (0.8 MB, 4 KB and 128 KB). */
  void** small = calloc(SMALL_COUNT, sizeof(void*));
  void** medium = calloc(MEDIUM_COUNT, sizeof(void*));
  void** mid = calloc(MID_COUNT, sizeof(void*));
  if (small == NULL || medium == NULL || mid == NULL) return NULL;
  keep_small(small);
  churn();
  keep_medium(medium);
  keep_mid(mid);
  g_sink = small;
  g_sink = medium;
  g_sink = mid;
  return small; /* everything kept stays live at exit */
}

#define GROW_BUFFERS 4
#define GROW_TARGET (24u << 20)

__attribute__((noinline)) void* grow_buffers(void) {
  void** buffers = calloc(GROW_BUFFERS, sizeof(void*));
  if (buffers == NULL) return NULL;
  for (int b = 0; b < GROW_BUFFERS; ++b) {
    for (size_t size = 1000; size < GROW_TARGET; size += size / 2) {
      buffers[b] = realloc(buffers[b], size);
      if (buffers[b] == NULL) return NULL;
      memset(buffers[b], b, size);
    }
    buffers[b] = realloc(buffers[b], GROW_TARGET);
    if (buffers[b] == NULL) return NULL;
  }
  return buffers;
}

__attribute__((noinline)) void* large_only(void* arg) {
  keep_medium((void**)arg);
  return arg;
}

/* Frees a sampled block twice, after a few sampled blocks were freed and
 * their spans reused. Prints the block's address first. */
static int double_free(void) {
  for (int i = 0; i < 8; ++i) free(malloc(100 + (size_t)i));
  char* block = malloc(100);
  printf("block %p\n", (void*)block);
  fflush(stdout);
  free(block);
  free(block);
  return 0;
}

static volatile int g_stop_sampling;

static void* sample_without_pause(void* arg) {
  (void)arg;
  while (!g_stop_sampling) free(malloc(64));
  return NULL;
}

static int fork_while_sampling(void) {
  pthread_t thread;
  if (pthread_create(&thread, NULL, sample_without_pause, NULL) != 0) return 1;
  for (int i = 0; i < 200; ++i) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      alarm(10);  /* a child stuck on the lock dies instead of hanging the test */
      free(malloc(64));
      _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  }
  g_stop_sampling = 1;
  pthread_join(thread, NULL);
  printf("forks ok\n");
  return 0;
}

/* What the profiler counts for a small block (up to 1 KiB): its class size
 * (larger ones count as requested). A sampled block is served as a
 * page-granular large block, so the smallest usable size of a few blocks
 * is the class size. */
static size_t class_size_of(size_t size) {
  size_t class_size = (size_t)-1;
  for (int i = 0; i < 32; ++i) {
    void* probe = malloc(size);
    size_t usable = malloc_usable_size(probe);
    if (usable < class_size) class_size = usable;
    free(probe);
  }
  return class_size;
}

int main(int argc, char** argv) {
  void* result = NULL;
  if (argc > 1 && strcmp(argv[1], "fork") == 0) return fork_while_sampling();
  if (argc > 1 && strcmp(argv[1], "double-free") == 0) return double_free();
  if (argc > 1 && strcmp(argv[1], "large-thread") == 0) {
    void** medium = calloc(MEDIUM_COUNT, sizeof(void*));
    pthread_t thread;
    if (medium == NULL || pthread_create(&thread, NULL, large_only, medium) != 0) return 1;
    pthread_join(thread, &result);
  } else if (argc > 1 && strcmp(argv[1], "realloc") == 0) {
    result = grow_buffers();
  } else if (argc > 1 && strcmp(argv[1], "thread") == 0) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, workload, NULL) != 0) return 1;
    pthread_join(thread, &result);
  } else {
    result = workload(NULL);
  }
  if (result == NULL) return 1;
  printf("small_block_bytes %zu\n", class_size_of(SMALL_SIZE));
  printf("prof_workload: done\n");
  return 0;
}
