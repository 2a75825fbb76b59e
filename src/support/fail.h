// The answer to a request that cannot be met.
#pragma once

#include <cerrno>

namespace xalloc {

// NULL with errno = ENOMEM, as malloc's contract asks.
inline void* fail_enomem() {
  errno = ENOMEM;
  return nullptr;
}

}  // namespace xalloc
