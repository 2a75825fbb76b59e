// Compile-time geometry of the allocator. docs/design.md explains the choices.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xalloc {

// `n` rounded up to a multiple of `to`, a power of two.
constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) & ~(to - 1); }

// Segments: naturally aligned regions reserved from the OS. Every pointer
// xalloc hands out lies in the first 32 MiB granule of a segment, so its
// metadata is found by masking the address.
constexpr size_t kSegmentShift = 25;
constexpr size_t kSegmentSize = size_t{1} << kSegmentShift;  // 32 MiB
constexpr uintptr_t kSegmentMask = kSegmentSize - 1;

// Slices: the unit in which segments are split into slabs and large spans.
constexpr size_t kSliceShift = 16;
constexpr size_t kSliceSize = size_t{1} << kSliceShift;  // 64 KiB
constexpr size_t kSlicesPerSegment = kSegmentSize / kSliceSize;  // 512
// The first slices of a segment hold its header: 512 page descriptors of
// 256 bytes each (page.h) and the slice map.
constexpr size_t kHeaderSlices = 3;
constexpr size_t kHeaderBytes = kHeaderSlices * kSliceSize;
// The most slices a span in a segment can have.
constexpr size_t kPayloadSlices = kSlicesPerSegment - kHeaderSlices;

constexpr size_t kOsPageSize = 4096;

// x86-64 user space: 47-bit addresses.
constexpr size_t kAddressBits = 47;

// malloc's result is aligned for any fundamental type (max_align_t).
constexpr size_t kMinAlignment = 16;

// Size classes (size_classes.h): 16-byte steps up to 128 bytes, then four
// classes per power of two up to kMaxSlabSize (five from 1 KiB to 16 KiB).
// Larger requests are large spans inside segments; above kMaxLargeSize they
// get their own mapping.
constexpr size_t kMaxSmallSize = 1024;  // served through the per-heap direct table
constexpr size_t kMaxSlabSize = 64 * 1024;
constexpr size_t kMaxLargeSize = 16 * 1024 * 1024;

// The largest alignment honoured by carving an aligned block from a slab
// (blocks of a class are aligned to the largest power of two dividing the
// class size, because slabs start on slice boundaries).
constexpr size_t kMaxSlabAlignment = kSliceSize;

// Globals that every process writes as it starts (the thread registry, the
// statistics, the slab pool): in .data with those that live there already
// rather than spread over .bss. A .bss page read before it is written costs
// two page faults (the shared zero page, then a private copy) and every
// such page at least one; in .data the first read finds the page mapped
// with its neighbours and the first write costs one copy.
#define XALLOC_STARTUP_DATA __attribute__((section(".data.xalloc_startup")))

// Globals that the fork() handlers write on both sides: the locks held
// across a fork and the state a child resets. After a fork each page
// written costs a copy-on-write fault in the parent and another in the
// child; in a section of their own, which the linker gathers from every
// object file (.data.* would stay interleaved by file), they share two
// pages instead of taking one per subsystem.
#define XALLOC_FORK_DATA __attribute__((section(".data_xalloc_fork")))

// Largest request ever satisfied; larger ones fail with ENOMEM like glibc's
// (which refuses anything above PTRDIFF_MAX).
constexpr size_t kMaxRequest = (size_t{1} << kAddressBits) - kSegmentSize * 2;

}  // namespace xalloc
