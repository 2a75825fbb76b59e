// The report formatter (support/report.h): it formats every message xalloc
// prints, misuse reports and statistics included, without allocating.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "support/report.h"

namespace {

template <typename... Args>
std::string fmt(const char* format, Args... args) {
  const xalloc::report::Arg list[] = {xalloc::report::Arg(args)..., xalloc::report::Arg("")};
  char buf[256];
  size_t n = xalloc::report::format(buf, sizeof(buf), format, list, sizeof...(Args));
  EXPECT_EQ(n, std::string(buf).size()) << "the length returned is the string's";
  return buf;
}

TEST(Report, FormatsEachDirective) {
  EXPECT_EQ(fmt("%s and %s", "one", "two"), "one and two");
  EXPECT_EQ(fmt("%u", 0u), "0");
  EXPECT_EQ(fmt("%u", UINT64_MAX), "18446744073709551615");
  EXPECT_EQ(fmt("%d", -42), "-42");
  EXPECT_EQ(fmt("%d", INT64_MIN), "-9223372036854775808");
  EXPECT_EQ(fmt("%x", 255u), "0xff");
  EXPECT_EQ(fmt("%p", reinterpret_cast<const void*>(0x7f00deadbeefULL)), "0x7f00deadbeef");
  EXPECT_EQ(fmt("100%%"), "100%");
  EXPECT_EQ(fmt("%s", static_cast<const char*>(nullptr)), "(null)");
}

TEST(Report, PadsToAWidthOnEitherSide) {
  EXPECT_EQ(fmt("[%8u]", 42u), "[      42]");
  EXPECT_EQ(fmt("[%-6s]", "ab"), "[ab    ]");
  EXPECT_EQ(fmt("[%3u]", 12345u), "[12345]") << "a wider value is not cut";
}

TEST(Report, MissingArgumentsAreMarkedNotRead) {
  EXPECT_EQ(fmt("%u and %u", 1u), "1 and <?>");
}

TEST(Report, TruncatesToTheBufferAndStaysTerminated) {
  const xalloc::report::Arg list[] = {xalloc::report::Arg("a long string that does not fit")};
  char buf[8];
  size_t n = xalloc::report::format(buf, sizeof(buf), "%s", list, 1);
  EXPECT_EQ(n, 7u);
  EXPECT_EQ(std::string(buf), "a long ");
}

}  // namespace
