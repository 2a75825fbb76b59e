#!/usr/bin/env python3
"""Writes the seed corpora of the xalloc fuzz targets (corpus/api, corpus/misuse).

Each seed is a small program in the byte encoding the targets read
(api_fuzz.cpp, misuse_fuzz.cpp, fuzz_common.h): an operation byte followed
by its arguments. The files are committed; run this again after changing
the encoding:  python3 tests/fuzz/make_seeds.py
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


# --- sizes and alignments (fuzz_common.h: draw_size, draw_alignment) ---------

def small(n):            # 0..1024
    return bytes([0]) + struct.pack('<H', n)


def medium(n):           # 0..256 KiB
    return bytes([130]) + struct.pack('<I', n)[:3]


def large(n):            # 64 KiB + n, n < 4 MiB
    return bytes([200]) + struct.pack('<I', n)


def edge(i):             # kEdgeSizes[i]
    return bytes([240, i])


def huge(n):             # 16 MiB + n, n < 8 MiB
    return bytes([249]) + struct.pack('<I', n)[:3]


def impossible(i):       # kImpossibleSizes[i]
    return bytes([253, i])


def align_pow2(k):       # 1 << k, k < 22
    return bytes([0, k])


def align_big(k):        # 4, 8, 16 MiB
    return bytes([205, k])


def align_bad(i):        # kBad[i]
    return bytes([220, i])


def align_too_big(i):    # kTooBig[i]
    return bytes([250, i])


def product(size_bytes, n):   # count x size from a size and an element count
    return bytes([1]) + size_bytes + bytes([n])


def overflow(i):
    return bytes([240, i])


# --- api_fuzz.cpp operations ---------------------------------------------------

def malloc(slot, size): return bytes([0, slot]) + size
def calloc(slot, prod): return bytes([4, slot]) + prod
def realloc(slot, size): return bytes([6, slot]) + size
def reallocarray(slot, prod): return bytes([8, slot]) + prod
def aligned_alloc(slot, align, size): return bytes([9, slot]) + align + size
def posix_memalign(slot, align, size): return bytes([10, slot]) + align + size
def memalign(slot, align, size): return bytes([11, slot]) + align + size
def valloc(slot, size): return bytes([12, slot]) + size
def pvalloc(slot, size): return bytes([13, slot]) + size
def free(slot): return bytes([14, slot])
def free_sized(slot): return bytes([17, slot])
def free_aligned_sized(slot): return bytes([18, slot])
def usable(slot): return bytes([19, slot])
def trim(): return bytes([20, 0, 0])
def collect(): return bytes([21])
def verify_all(): return bytes([22])
def free_run(first, n): return bytes([23, first, n])


def api_seeds():
    seeds = {}
    seeds['small_churn'] = b''.join(
        malloc(i, small((i * 37) % 1025)) for i in range(64)) + b''.join(
        free(i) for i in range(0, 64, 2)) + b''.join(
        malloc(i, small(i * 13)) for i in range(0, 64, 2)) + verify_all() + free_run(0, 63)
    seeds['every_api'] = b''.join([
        malloc(1, small(100)), calloc(2, product(small(1000), 10)), realloc(1, medium(5000)),
        reallocarray(2, product(medium(20000), 4)), aligned_alloc(3, align_pow2(6), small(64)),
        posix_memalign(4, align_pow2(12), medium(10000)), memalign(5, align_pow2(16), small(1)),
        valloc(6, small(10)), pvalloc(7, medium(5000)), usable(1), usable(3), verify_all(),
        free_sized(1), free_aligned_sized(3), free(2), free(4), free(5), free(6), free(7), trim(), collect()])
    seeds['large_and_huge'] = b''.join([
        malloc(10, large(100000)), malloc(11, large(3 << 20)), realloc(10, large(2 << 20)),
        realloc(11, medium(100)), malloc(12, huge(4 << 20)), realloc(12, huge(6 << 20)),
        realloc(12, large(1 << 20)), aligned_alloc(13, align_pow2(21), large(500000)),
        memalign(14, align_big(2), medium(4096)), verify_all(), free(10), free(11), free(12), trim()])
    seeds['edges'] = b''.join(malloc(i, edge(i)) for i in range(26)) + b''.join(
        realloc(i, edge(25 - i)) for i in range(26)) + free_run(0, 26)
    seeds['bad_input'] = b''.join([
        malloc(1, impossible(0)), malloc(1, impossible(3)), calloc(2, overflow(0)), calloc(2, overflow(2)),
        malloc(3, small(50)), reallocarray(3, overflow(1)), realloc(3, impossible(4)),
        aligned_alloc(4, align_bad(2), small(64)), posix_memalign(4, align_pow2(2), small(64)),
        posix_memalign(4, align_bad(3), small(64)), memalign(4, align_bad(3), small(64)),
        memalign(4, align_bad(10), small(64)), aligned_alloc(5, align_too_big(0), small(16)),
        posix_memalign(5, align_too_big(2), small(16)), valloc(6, impossible(0)), pvalloc(6, impossible(2)),
        realloc(3, small(0)), usable(3), free(3)])
    rng = random.Random(1)
    ops = []
    for _ in range(300):
        slot = rng.randrange(48)
        kind = rng.randrange(10)
        size = small(rng.randrange(1025)) if rng.random() < 0.7 else medium(rng.randrange(200000))
        if kind < 4:
            ops.append(malloc(slot, size))
        elif kind < 6:
            ops.append(free(slot))
        elif kind == 6:
            ops.append(realloc(slot, size))
        elif kind == 7:
            ops.append(aligned_alloc(slot, align_pow2(rng.randrange(13)), size))
        elif kind == 8:
            ops.append(calloc(slot, product(size, rng.randrange(8))))
        else:
            ops.append(usable(slot))
    seeds['long_mixed'] = b''.join(ops) + verify_all()
    seeds['realloc_chain'] = b''.join(
        realloc(7, s) for s in [small(1), small(17), small(300), medium(2000), medium(70000), large(10),
                                large(1 << 20), medium(100), small(5), small(0)])
    return seeds


# --- misuse_fuzz.cpp -----------------------------------------------------------
# First byte < 64: the input may plant a misuse. Operations (op % 10):
#   0-3 allocate (op / 10 % 4: malloc, calloc, aligned_alloc, realloc(NULL))
#   4 realloc, 5-7 free, 8 owns checks, 9 plant: kind byte (0 double free,
#   1 stale realloc, 2 interior free, 3 foreign free) and its arguments.

def m_alloc(how, slot, size, align_k=None):
    op = 10 * how  # op % 10 == 0, op / 10 % 4 == how
    out = bytes([op, slot]) + size
    if how == 2:
        out += bytes([align_k or 4])
    return out


def m_free(slot): return bytes([5, slot])


def plant(kind, *args): return bytes([9, kind] + list(args))


def misuse_seeds():
    seeds = {}
    live = b''.join([m_alloc(0, 1, small(48)), m_alloc(0, 2, small(48)), m_alloc(1, 3, medium(3000)),
                     m_alloc(2, 4, medium(200), 6), m_alloc(0, 5, large(200000)), m_alloc(3, 6, small(1000))])
    # double free: slot, remote?, entry, count of others, others...
    seeds['double_free'] = bytes([0]) + live + plant(0, 1, 1, 0, 2, 2, 3)
    seeds['double_free_remote'] = bytes([0]) + live + plant(0, 2, 0, 0, 0)
    seeds['double_free_large_realloc'] = bytes([0]) + live + plant(0, 5, 1, 3, 0)
    # stale realloc: slot, size, entry
    seeds['stale_realloc'] = bytes([0]) + live + plant(1, 6) + medium(9000) + bytes([0])
    # interior free: slot, offset kind, [offset], entry
    seeds['interior_free'] = bytes([0]) + live + plant(2, 3, 4, 100, 0, 0, 0, 1)
    seeds['interior_free_large'] = bytes([0]) + live + plant(2, 5, 3, 0)
    # foreign free: global offset, mapping offset, u64, which, entry
    seeds['foreign_stack'] = bytes([0]) + live + plant(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    seeds['foreign_libc'] = bytes([0]) + live + plant(3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3)
    seeds['foreign_wild'] = bytes([0]) + live + plant(3, 0, 0, 0x10, 0x32, 0x54, 0x76, 0x12, 0x7f, 0, 0, 9, 4)
    rng = random.Random(2)
    ops = []
    for _ in range(250):
        slot = rng.randrange(64)
        kind = rng.randrange(6)
        size = small(rng.randrange(1025)) if rng.random() < 0.8 else large(rng.randrange(1 << 20))
        if kind < 3:
            ops.append(m_alloc(kind % 4, slot, size, rng.randrange(12)))
        elif kind == 3:
            ops.append(bytes([4, slot]) + size)  # realloc
        else:
            ops.append(m_free(slot))
    seeds['long_mixed_then_double_free'] = bytes([1]) + b''.join(ops) + plant(0, 7, 1, 1, 3, 1, 2, 3)
    seeds['valid_only'] = bytes([200]) + live + b''.join(m_free(i) for i in range(1, 7)) + live + bytes([8, 3, 1, 2, 3, 4])
    return seeds


def write(directory, seeds):
    os.makedirs(directory, exist_ok=True)
    for name, data in seeds.items():
        assert len(data) < 4096, name
        with open(os.path.join(directory, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    write(os.path.join(HERE, 'corpus', 'api'), api_seeds())
    write(os.path.join(HERE, 'corpus', 'misuse'), misuse_seeds())
