// Regex::FindAll's failures: a pattern from a tokenizer file that backtracks
// without bound on the caller's text hits PCRE2's match limit, which is bad
// input (InvalidArgument naming the byte offset), not an internal error.
#include "text/pretokenizer_regex.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace strata::text {
namespace {

using ::testing::HasSubstr;

TEST(RegexTest, FindsNonOverlappingMatches) {
  auto re = Regex::Compile("a+");
  ASSERT_TRUE(re.ok()) << re.status();
  std::vector<std::pair<size_t, size_t>> spans;
  ASSERT_TRUE((*re)->FindAll("aab a", &spans).ok());
  EXPECT_EQ(spans, (std::vector<std::pair<size_t, size_t>>{{0, 2}, {4, 5}}));
}

TEST(RegexTest, CatastrophicBacktrackingIsInvalidArgumentWithTheOffset) {
  // Two ways to match each 'a', and a subject that fails at its end: 2^40
  // paths from the first start.
  auto re = Regex::Compile("(?:a|a)+$");
  ASSERT_TRUE(re.ok()) << re.status();
  std::vector<std::pair<size_t, size_t>> spans;
  const Status st = (*re)->FindAll("xy" + std::string(40, 'a') + "b", &spans);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("pre-tokenizer pattern, matching from byte 0 of the text: "));
  EXPECT_THAT(std::string(st.message()), HasSubstr("limit"));
}

}  // namespace
}  // namespace strata::text
