// Stack walking from the call-frame information (CFI) that compilers put in
// every object's .eh_frame for C++ exceptions, without libunwind.
//
// The heap profiler walks a stack for every sample, hundreds of thousands
// of times a second in a busy program, from any thread. libunwind, stepping
// frame by frame, blocks and unblocks signals around its cache lock at
// every step (two system calls a frame), and its faster unw_backtrace
// builds a cache per thread, which a short-lived thread pays for and never
// uses; a walk cost 10-19 us where system calls are slow. This walker
// takes no lock and makes no system call: glibc's _dl_find_object (lock-
// free) finds the object of an address, the object's .eh_frame_hdr table
// finds the function's description, and the rule that unwinds a frame at
// a given address is computed from it once and kept in a table shared by
// all threads.
//
// It follows only what x86-64 code describes in the common way: the
// caller's stack pointer (the CFA) at an offset from rsp or rbp, the return
// address and rbp saved at offsets from it. Anything else (a signal frame,
// a DWARF expression, a frame without CFI) ends the walk as incomplete,
// and the caller can fall back to libunwind.
#pragma once

namespace xalloc {

struct FrameWalk {
  int depth;      // return addresses stored
  bool complete;  // reached the outermost frame or `max`; false: stopped at a frame it cannot unwind
};

// Return addresses of the caller's frames, innermost first: frames[0] is in
// the function that called frame_walk.
FrameWalk frame_walk(void** frames, int max);

}  // namespace xalloc
