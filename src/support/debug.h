// Internal invariant checks. Built in with -DXALLOC_DEBUG_CHECKS=ON (the
// debug flavour the test command runs); compiled out otherwise.
#pragma once

#include "support/report.h"

#if defined(XALLOC_DEBUG_CHECKS)
#define XALLOC_DEBUG_ONLY(stmt) stmt
#define XALLOC_CHECK(cond)                                                                   \
  do {                                                                                       \
    if (__builtin_expect(!(cond), 0))                                                        \
      ::xalloc::report::fatal("internal invariant failed: %s (%s:%d)", #cond, __FILE__, __LINE__); \
  } while (0)
#else
#define XALLOC_DEBUG_ONLY(stmt) \
  do {                          \
  } while (0)
#define XALLOC_CHECK(cond) \
  do {                     \
  } while (0)
#endif
