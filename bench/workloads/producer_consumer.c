/*
 * producer_consumer: blocks allocated on one thread, freed on another.
 *
 * Models seed 004 (AethAlloc's producer_consumer: 4 producers, 4
 * consumers, 1,000,000 blocks of 64 bytes each, "network packet handoff").
 * Producer i allocates blocks, writes a sequence number into each and hands
 * them one by one to consumer i through a bounded single-producer /
 * single-consumer ring (lock-free, 1024 entries); the consumer checks and
 * frees them. Every free is a remote free; the ring keeps the number of
 * blocks in flight bounded, so the allocator, not the queue, dominates.
 *
 * usage: producer_consumer [pairs=4] [blocks_per_producer=1000000] [size=64]
 * prints: blocks, time_s, blocks_per_s, ns_per_block.
 */
#include "xbench.h"

#include <pthread.h>
#include <stdatomic.h>

#define RING 1024u

typedef struct ring {
  _Alignas(64) _Atomic uint64_t head; /* written by the producer */
  _Alignas(64) _Atomic uint64_t tail; /* written by the consumer */
  _Alignas(64) void *slot[RING];
} ring;

typedef struct pair {
  ring q;
  pthread_t producer, consumer;
  uint64_t blocks;
  size_t size;
  pthread_barrier_t *start;
} pair;

static void *produce(void *arg) {
  pair *p = (pair *)arg;
  pthread_barrier_wait(p->start);
  uint64_t head = 0;
  for (uint64_t n = 0; n < p->blocks; n++) {
    uint64_t *b = (uint64_t *)xb_xmalloc(p->size);
    b[0] = n;
    ((volatile unsigned char *)b)[p->size - 1] = (unsigned char)n;
    unsigned spins = 0;
    while (head - atomic_load_explicit(&p->q.tail, memory_order_acquire) == RING) xb_pause(&spins);
    p->q.slot[head % RING] = b;
    atomic_store_explicit(&p->q.head, ++head, memory_order_release);
  }
  return NULL;
}

static void *consume(void *arg) {
  pair *p = (pair *)arg;
  pthread_barrier_wait(p->start);
  uint64_t tail = 0;
  for (uint64_t n = 0; n < p->blocks; n++) {
    unsigned spins = 0;
    while (atomic_load_explicit(&p->q.head, memory_order_acquire) == tail) xb_pause(&spins);
    uint64_t *b = (uint64_t *)p->q.slot[tail % RING];
    atomic_store_explicit(&p->q.tail, ++tail, memory_order_release);
    if (b[0] != n || ((volatile unsigned char *)b)[p->size - 1] != (unsigned char)n)
      xb_fail("block %llu arrived corrupted", (unsigned long long)n);
    free(b);
  }
  return NULL;
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[pairs=4] [blocks_per_producer=1000000] [size=64]");
  xb_init();
  unsigned pairs = (unsigned)xb_arg_u64(argc, argv, 1, 4);
  uint64_t blocks = xb_arg_u64(argc, argv, 2, 1000000);
  size_t size = (size_t)xb_arg_u64(argc, argv, 3, 64);
  if (pairs == 0 || size < sizeof(uint64_t)) return XB_EXIT_USAGE;

  pair *p = (pair *)aligned_alloc(64, sizeof(pair) * pairs);
  if (p == NULL) xb_fail("out of memory");
  memset(p, 0, sizeof(pair) * pairs);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2 * pairs + 1);
  for (unsigned i = 0; i < pairs; i++) {
    p[i].blocks = blocks;
    p[i].size = size;
    p[i].start = &start;
    pthread_create(&p[i].producer, NULL, produce, &p[i]);
    pthread_create(&p[i].consumer, NULL, consume, &p[i]);
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = xb_now_ns();
  for (unsigned i = 0; i < pairs; i++) {
    pthread_join(p[i].producer, NULL);
    pthread_join(p[i].consumer, NULL);
  }
  double secs = xb_seconds_since(t0);
  double total = (double)blocks * pairs;
  printf("blocks=%.0f\n", total);
  printf("time_s=%.6f\n", secs);
  printf("blocks_per_s=%.0f\n", total / secs);
  printf("ns_per_block=%.1f\n", secs * 1e9 / total);
  pthread_barrier_destroy(&start);
  free(p);
  return 0;
}
