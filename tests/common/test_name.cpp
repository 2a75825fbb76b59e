// Shared GoogleTest glue of the core tests: xtest::current_test_name(), and
// an environment that initialises the allocator on the main thread before
// any test runs (tests of a fresh, uninitialised allocator re-execute
// themselves and skip it: see xtest::in_fresh_process).
#include <gtest/gtest.h>

#include "test_util.h"
#include "xalloc/xalloc.h"

std::string xtest::current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "";
  return std::string(info->test_suite_name()) + "." + info->name();
}

namespace {

class InitialiseAllocator : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!xtest::in_fresh_process()) xalloc_free(xtest::launder_ptr(xalloc_malloc(1)));
  }
};

[[maybe_unused]] ::testing::Environment* const g_init = ::testing::AddGlobalTestEnvironment(new InitialiseAllocator);

}  // namespace
