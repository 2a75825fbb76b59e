#include "frontend/heap.h"

#include <array>
#include <bit>
#include <new>

#include "diag/heap_profiler.h"
#include "platform/os.h"
#include "support/options.h"

namespace xalloc {

XALLOC_STARTUP_DATA constinit Page g_empty_page{};
constinit Heap g_empty_heap{Heap::EmptyTag{}};
__thread Heap* t_heap = &g_empty_heap;

namespace {

// Each class's first granule in a direct table whose granules map to
// `granule_class` (kDirectSlots for a class none maps to), for keeping
// Heap::direct in step: a class's granules follow its first.
constexpr std::array<uint8_t, kNumClasses> first_granules(const std::array<uint8_t, kDirectSlots>& granule_class) {
  std::array<uint8_t, kNumClasses> first{};
  first.fill(kDirectSlots);
  for (size_t g = kDirectSlots; g-- > 0;) first[granule_class[g]] = static_cast<uint8_t>(g);
  return first;
}
constexpr auto kFirstGranule = first_granules(kGranuleClass);

// The class a young heap serves a class's sizes from: the smallest power
// of two that holds them, up to kYoungMaxSize; each larger class is its own.
constexpr unsigned young_class_of(unsigned cls) {
  size_t size = class_size_of(cls);
  return size <= kYoungMaxSize ? class_of_computed(std::bit_ceil(size)) : cls;
}
static_assert(young_class_of(class_of_computed(48)) == class_of_computed(64));
static_assert(young_class_of(class_of_computed(1024)) == class_of_computed(1024));
static_assert(young_class_of(class_of_computed(1536)) == class_of_computed(2048));
static_assert(young_class_of(class_of_computed(4608)) == class_of_computed(8192));
static_assert(young_class_of(class_of_computed(9216)) == class_of_computed(9216));

constexpr auto kYoungClass = [] {
  std::array<uint8_t, kNumClasses> table{};
  for (unsigned c = 0; c < kNumClasses; ++c) table[c] = static_cast<uint8_t>(young_class_of(c));
  return table;
}();

// The classes above kMaxSmallSize that a young heap serves from `cls`'s
// slabs, [first, end): consecutive, as the classes are in size order.
struct YoungGroup {
  unsigned first, end;
};
constexpr YoungGroup young_medium_group(unsigned cls) {
  unsigned first = kNumSmallClasses;
  while (first < kNumClasses && kYoungClass[first] != cls) ++first;
  unsigned end = first;
  while (end < kNumClasses && kYoungClass[end] == cls) ++end;
  return {first, end};
}
static_assert(young_medium_group(class_of_computed(2048)).first == class_of_computed(1025));
static_assert(young_medium_group(class_of_computed(2048)).end == class_of_computed(2049));

// The direct table of a young heap: its granules' classes, and each class's
// first granule.
constexpr auto kYoungGranuleClass = [] {
  std::array<uint8_t, kDirectSlots> table{};
  for (size_t g = 0; g < kDirectSlots; ++g) table[g] = kYoungClass[kGranuleClass[g]];
  return table;
}();
constexpr auto kYoungFirstGranule = first_granules(kYoungGranuleClass);

}  // namespace

unsigned young_class(unsigned cls) { return kYoungClass[cls]; }

void heap_set_current(Heap* heap, unsigned cls, Page* page) {
  heap->current[cls] = page;
  bool small = cls < kNumSmallClasses;
  // Sampled small allocations go through the class's window; counted ones,
  // and sampled ones of 1-64 KiB, take the slow path: the tables stay empty.
  if (small && heap->windows != nullptr) page = &heap->windows->window[cls];
  else if (prof::watching()) page = &g_empty_page;
  else if (heap->borrowed != nullptr && heap->borrowed->list[cls].free != nullptr) page = &heap->borrowed->list[cls];
  heap->serving[cls] = page;
  if (!small) {
    // A young heap's power-of-two slab serves the classes below it too.
    if (heap->young && kYoungClass[cls] == cls && kClassInfo[cls].size <= kYoungMaxSize) {
      YoungGroup group = young_medium_group(cls);
      for (unsigned c = group.first; c < group.end; ++c) heap->serving[c] = page;
    }
    return;
  }
  const auto& granule_class = heap->young ? kYoungGranuleClass : kGranuleClass;
  const auto& first_granule = heap->young ? kYoungFirstGranule : kFirstGranule;
  for (size_t g = first_granule[cls]; g < kDirectSlots && granule_class[g] == cls; ++g)
    __atomic_store_n(&heap->direct[g], page, __ATOMIC_RELAXED);
}

// Points the direct table at the current slabs again.
void direct_table_restore(Heap* heap) {
  for (unsigned cls = 0; cls < kNumSmallClasses; ++cls) heap_set_current(heap, cls, heap->current[cls]);
}

// From now on each size gets its own class: the slabs of the power-of-two
// classes stay as they are, the other classes start empty.
void heap_grow_up(Heap* heap) {
  heap->young = false;
  direct_table_restore(heap);
  for (unsigned cls = kNumSmallClasses; cls < kNumClasses && kClassInfo[cls].size <= kYoungMaxSize; ++cls)
    heap_serve(heap, cls);
}

void heap_serve(Heap* heap, unsigned cls) { heap_set_current(heap, cls, heap->current[cls]); }

void heap_init(Heap* heap, uint64_t thread_id, StagedBlock* stage, OutboxLinks* links) {
  new (heap) Heap(Heap::EmptyTag{});
  heap->outbox.stage = heap->outbox.stage_next = stage;
  heap->outbox.stage_end = stage + kStageSlots;
  heap->outbox.links = links;
  heap->outbox.budget = g_options.remote_batch_bytes;
  heap->thread_id = thread_id;
#if XALLOC_SECURE
  heap->quarantine.mid = heap->quarantine.slots + std::min<size_t>(g_options.quarantine, secure::kQuarantineDepthMax);
  heap->quarantine.next = heap->quarantine.slots;
  heap->quarantine.turn = heap->quarantine.mid;
#endif
  heap->sample_countdown = prof::sample_interval();
  // (Without its windows - no memory for them - the heap samples through
  // the slow path, as when statistics are on: set_current, heap_alloc_slow.)
  if (prof::windowed()) heap->windows = static_cast<ProfileWindows*>(os::map(sizeof(ProfileWindows)));
  if (heap->windows != nullptr)
    for (int64_t& countdown : heap->windows->countdown) countdown = prof::sample_interval();
  // Not in secure mode, whose canary ends the block: in a larger block a
  // short overflow would stop short of it. Nor while statistics or the
  // profiler count requests by their own class.
  heap->young = !secure::kEnabled && !prof::watching() && !prof::windowed();
}

}  // namespace xalloc
