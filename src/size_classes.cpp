#include "size_classes.h"

namespace xalloc {

unsigned aligned_class_of(size_t size, size_t alignment) {
  for (unsigned cls = class_of(size < alignment ? alignment : size); cls < kNumClasses; ++cls) {
    if ((kClassInfo[cls].size & (alignment - 1)) == 0) return cls;
  }
  return kNumClasses;
}

}  // namespace xalloc
