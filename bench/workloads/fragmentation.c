/*
 * fragmentation: resident memory under long-lived mixed-size churn, and
 * how much of it comes back after most of the heap is freed.
 *
 * Models seed 004 (AethAlloc's fragmentation: 10,000 slots, 50,000
 * iterations, mixed sizes 16 B - 100 KiB, RSS growth). Every slot holds a
 * block; an iteration replaces a random slot with a block of a new size:
 * 70% 16-256 B, 20% 257 B-4 KiB, 8% 4-32 KiB, 2% 32 KiB-max. Every byte of
 * every block is written, so resident memory is the allocator's real
 * footprint. After the churn 90% of the blocks, chosen at random (so the
 * survivors are scattered through the heap), are freed; the program then
 * stays idle for one second and reads its RSS again: memory the allocator
 * returns to the system by itself (no malloc_trim) shows up here.
 *
 * usage: fragmentation [slots=10000] [iterations=50000] [max_size=102400] [seed=1]
 * prints: time_s (the churn phase), ops_per_s, live_kb (bytes requested and
 *         live at the end of the churn), rss_start_kb, rss_peak_kb (sampled),
 *         rss_end_kb, rss_growth_kb, rss_per_live (rss_end - rss_start over
 *         live), rss_at_free_kb (right after freeing 90%), live_after_free_kb,
 *         rss_after_free_kb (one second later).
 */
#include "xbench.h"

static size_t pick_size(xb_rng *rng, size_t max_size) {
  uint64_t r = xb_below(rng, 100);
  if (r < 70) return (size_t)xb_range(rng, 16, 256);
  if (r < 90) return (size_t)xb_range(rng, 257, 4096);
  if (r < 98) return (size_t)xb_range(rng, 4097, 32768 < max_size ? 32768 : max_size);
  return (size_t)xb_range(rng, 32769 < max_size ? 32769 : max_size, max_size);
}

static void fill(void *p, size_t n, size_t i) {
  memset(p, (int)(i & 0x7f), n);
  xb_tag(p, n, (uint8_t)i);
}

int main(int argc, char **argv) {
  xb_usage_check(argc, argv, "[slots=10000] [iterations=50000] [max_size=102400] [seed=1]");
  xb_init();
  size_t slots = (size_t)xb_arg_u64(argc, argv, 1, 10000);
  uint64_t iterations = xb_arg_u64(argc, argv, 2, 50000);
  size_t max_size = (size_t)xb_arg_u64(argc, argv, 3, 102400);
  xb_rng rng = xb_rng_make(xb_arg_u64(argc, argv, 4, 1));
  if (slots == 0 || max_size < 4097) {
    fprintf(stderr, "fragmentation: need slots > 0 and max_size > 4096\n");
    return XB_EXIT_USAGE;
  }

  void **slot = (void **)calloc(slots, sizeof *slot);
  size_t *size = (size_t *)calloc(slots, sizeof *size);
  size_t *order = (size_t *)calloc(slots, sizeof *order);
  if (slot == NULL || size == NULL || order == NULL) xb_fail("out of memory");
  long rss_start = xb_rss_kb();

  uint64_t t0 = xb_now_ns();
  size_t live = 0;
  for (size_t i = 0; i < slots; i++) {
    size[i] = pick_size(&rng, max_size);
    slot[i] = xb_xmalloc(size[i]);
    fill(slot[i], size[i], i);
    live += size[i];
  }
  long rss_peak = xb_rss_kb();
  for (uint64_t n = 0; n < iterations; n++) {
    size_t i = (size_t)xb_below(&rng, slots);
    xb_check_tag(slot[i], size[i], (uint8_t)i);
    free(slot[i]);
    live -= size[i];
    size[i] = pick_size(&rng, max_size);
    slot[i] = xb_xmalloc(size[i]);
    fill(slot[i], size[i], i);
    live += size[i];
    if ((n & 255) == 0) {
      long rss = xb_rss_kb();
      if (rss > rss_peak) rss_peak = rss;
    }
  }
  double secs = xb_seconds_since(t0);
  long rss_end = xb_rss_kb();
  if (rss_end > rss_peak) rss_peak = rss_end;

  /* Free a random 90% of the live set (Fisher-Yates over slot indices). */
  for (size_t i = 0; i < slots; i++) order[i] = i;
  for (size_t i = slots - 1; i > 0; i--) {
    size_t j = (size_t)xb_below(&rng, i + 1);
    size_t tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
  size_t to_free = slots - slots / 10;
  size_t live_after = live;
  for (size_t k = 0; k < to_free; k++) {
    size_t i = order[k];
    xb_check_tag(slot[i], size[i], (uint8_t)i);
    free(slot[i]);
    live_after -= size[i];
    slot[i] = NULL;
  }
  long rss_at_free = xb_rss_kb();
  xb_sleep_ms(1000);
  long rss_after_free = xb_rss_kb();

  for (size_t i = 0; i < slots; i++) {
    if (slot[i] != NULL) xb_check_tag(slot[i], size[i], (uint8_t)i);
    free(slot[i]);
  }

  printf("time_s=%.6f\n", secs);
  printf("ops_per_s=%.0f\n", (double)(iterations + slots) / secs);
  printf("live_kb=%zu\n", live / 1024);
  printf("rss_start_kb=%ld\n", rss_start);
  printf("rss_peak_kb=%ld\n", rss_peak);
  printf("rss_end_kb=%ld\n", rss_end);
  printf("rss_growth_kb=%ld\n", rss_end - rss_start);
  printf("rss_per_live=%.3f\n", (double)(rss_end - rss_start) * 1024.0 / (double)(live ? live : 1));
  printf("rss_at_free_kb=%ld\n", rss_at_free);
  printf("live_after_free_kb=%zu\n", live_after / 1024);
  printf("rss_after_free_kb=%ld\n", rss_after_free);
  free(order);
  free(size);
  free(slot);
  return 0;
}
