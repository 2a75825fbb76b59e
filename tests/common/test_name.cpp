// Shared GoogleTest glue of the core tests: xtest::current_test_name(), and
// an environment that initialises the allocator on the main thread before
// any test runs (tests of a fresh, uninitialised allocator re-execute
// themselves and skip it: see xtest::in_fresh_process).
#include <gtest/gtest.h>

#include <cstdio>

#include "test_util.h"
#include "xalloc/xalloc.h"

std::string xtest::current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "";
  return std::string(info->test_suite_name()) + "." + info->name();
}

bool xtest::rerun_in_fresh_process(unsigned timeout_s) { return rerun_in_fresh_process_with({}, timeout_s); }

bool xtest::rerun_in_fresh_process_with(const std::vector<std::pair<std::string, std::string>>& env,
                                        unsigned timeout_s) {
  if (xtest::in_fresh_process()) return true;
  auto r = xtest::run_test_in_fresh_process(xtest::current_test_name(), timeout_s, env);
  EXPECT_TRUE(r.exited() && r.exit_code() == 0) << r.describe();
  return false;
}

namespace {

// In a fresh process stdout is dropped (its test report is noise): failed
// assertions go to stderr, which the parent test prints when it fails.
class FailuresToStderr : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "%s:%d: %s\n", result.file_name() != nullptr ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
};

class InitialiseAllocator : public ::testing::Environment {
 public:
  void SetUp() override {
    if (xtest::in_fresh_process()) {
      ::testing::UnitTest::GetInstance()->listeners().Append(new FailuresToStderr);
      return;
    }
    xalloc_free(xtest::launder_ptr(xalloc_malloc(1)));
  }
};

[[maybe_unused]] ::testing::Environment* const g_init = ::testing::AddGlobalTestEnvironment(new InitialiseAllocator);

}  // namespace
