// Hostile chat templates and template inputs (issue 27): every case here
// used to crash the host (stack overflow, SIGFPE, an exception out of the
// library) or run without bound. Each now fails cleanly, with an
// InvalidArgument naming the template position, on a 256 KB thread stack and
// within seconds. Inputs go well past the limits of base/input_limits.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/bounded_json.h"
#include "base/input_limits.h"
#include "small_stack.h"
#include "text/chat_template.h"
#include "text/jinja/value.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

nlohmann::ordered_json NoVariables() { return nlohmann::ordered_json::object(); }

// Compiles and renders `source` on a small stack; returns the result.
StatusOr<std::string> RenderSmall(const std::string& source,
                                  const nlohmann::ordered_json& context = NoVariables(),
                                  const jinja::RenderOptions& options = {}) {
  StatusOr<std::string> result = absl::UnknownError("the thread did not run");
  EXPECT_TRUE(testing::RunOnSmallStack([&] {
    auto tmpl = ChatTemplate::Compile(source, "t");
    if (!tmpl.ok()) {
      result = tmpl.status();
      return;
    }
    result = (*tmpl)->RenderOrdered(context, options);
  }));
  return result;
}

// The error of RenderSmall, checked to be InvalidArgument at a template position.
std::string ErrorOf(const std::string& source,
                    const nlohmann::ordered_json& context = NoVariables(),
                    const jinja::RenderOptions& options = {}) {
  auto result = RenderSmall(source, context, options);
  EXPECT_FALSE(result.ok()) << "rendered " << result->size() << " bytes";
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  const std::string message(result.status().message());
  EXPECT_THAT(message, MatchesRegex("t:[0-9]+:[0-9]+: .*")) << message;
  return message;
}

// Options with small budgets, so that the tests that exhaust them are quick.
jinja::RenderOptions Small() {
  jinja::RenderOptions o;
  o.limits.max_steps = 200'000;
  o.limits.max_string_bytes = 1 << 20;
  o.limits.max_output_bytes = 1 << 20;
  o.limits.max_items = 10'000;
  o.limits.max_memory_bytes = 16 << 20;
  return o;
}

// ---- Parsing: nesting is refused before recursing ----

TEST(JinjaHostileTest, DeeplyNestedSourceIsRefusedOnASmallStack) {
  constexpr int kDeep = 10'000;  // far past limits::kMaxTemplateNesting
  const struct {
    const char* name;
    std::string source;
  } cases[] = {
      {"parentheses", "{{ " + Repeat("(", kDeep) + "1" + Repeat(")", kDeep) + " }}"},
      {"lists", "{{ " + Repeat("[", kDeep) + Repeat("]", kDeep) + " }}"},
      {"dicts", "{{ " + Repeat("{'a': ", kDeep) + "1" + Repeat("}", kDeep) + " }}"},
      {"calls", "{{ " + Repeat("f(", kDeep) + Repeat(")", kDeep) + " }}"},
      {"subscripts", "{{ " + Repeat("x[", kDeep) + "0" + Repeat("]", kDeep) + " }}"},
      {"not", "{{ " + Repeat("not ", kDeep) + "x }}"},
      {"unary minus", "{{ " + Repeat("- ", kDeep) + "1 }}"},
      {"conditionals", "{{ " + Repeat("1 if x else ", kDeep) + "2 }}"},
      {"if blocks", Repeat("{% if x %}", kDeep) + Repeat("{% endif %}", kDeep)},
      {"for blocks", Repeat("{% for x in y %}", kDeep) + Repeat("{% endfor %}", kDeep)},
      {"macro blocks", Repeat("{% macro m() %}", kDeep) + Repeat("{% endmacro %}", kDeep)},
      {"filter blocks", Repeat("{% filter upper %}", kDeep) + Repeat("{% endfilter %}", kDeep)},
      // Parsed in loops, but each step nests the tree one level deeper.
      {"attribute chain", "{{ x" + Repeat(".a", kDeep) + " }}"},
      {"filter chain", "{{ x" + Repeat(" | trim", kDeep) + " }}"},
      {"additions", "{{ 1" + Repeat(" + 1", kDeep) + " }}"},
      {"concatenations", "{{ 'a'" + Repeat(" ~ 'a'", kDeep) + " }}"},
      {"comparisons chained by and", "{{ x" + Repeat(" and x", kDeep) + " }}"},
      {"item chain", "{{ x" + Repeat("[0]", kDeep) + " }}"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string error = ErrorOf(c.source);
    EXPECT_THAT(error, HasSubstr("nested deeper than")) << error;
  }
}

TEST(JinjaHostileTest, NestingWithinTheLimitsStillParsesAndRenders) {
  // Blocks and brackets count together: 40 + 1 (the output) + 20 < 64.
  const int n = 40;
  auto r = RenderSmall(Repeat("{% if true %}", n) + "{{ " + Repeat("(", n / 2) + "1" +
                       Repeat(")", n / 2) + " }}" + Repeat("{% endif %}", n));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "1");
  const int e = limits::kMaxTemplateExprDepth - 1;
  r = RenderSmall("{{ 0" + Repeat(" + 1", e) + " }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::to_string(e));
}

TEST(JinjaHostileTest, HundredThousandNestedIfsFailFast) {
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf(Repeat("{% if x %}", 100'000) + Repeat("{% endif %}", 100'000));
  EXPECT_THAT(error, HasSubstr("nested deeper than"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(JinjaHostileTest, ManyTokensOnOneLineLexInLinearTime) {
  // Columns were counted from the line start for every token: quadratic.
  const auto start = std::chrono::steady_clock::now();
  auto r = RenderSmall(Repeat("{{ x }}", 200'000), {{"x", "y"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 200'000u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// ---- Literals ----

TEST(JinjaHostileTest, OverlongIntegerLiteralsAreParseErrors) {
  EXPECT_EQ(ErrorOf("{{ 99999999999999999999 }}"),
            "t:1:4: integer literal 99999999999999999999 does not fit in 64 bits");
  EXPECT_THAT(ErrorOf("\n  {{ 0x1FFFFFFFFFFFFFFFF }}"), StartsWith("t:2:6: integer literal 0x1"));
  EXPECT_THAT(ErrorOf("{{ x.99999999999999999999 }}"), StartsWith("t:1:6: integer literal"));
  EXPECT_THAT(ErrorOf("{{ 0b }}"), StartsWith("t:1:4: invalid integer literal"));
  // The largest one is fine; floats saturate as in Python.
  auto r = RenderSmall("{{ 9223372036854775807 }} {{ 1e999 }} {{ 1e-999 }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "9223372036854775807 inf 0.0");
}

// ---- Checked integer arithmetic ----

TEST(JinjaHostileTest, IntegerArithmeticOverflowIsAnError) {
  const std::string kMin = "(-9223372036854775807 - 1)";
  const std::string overflow = "integer overflow: result does not fit in 64 bits";
  for (const std::string& expr : std::vector<std::string>{
           kMin + " // -1", "-" + kMin, kMin + " * -1", kMin + " - 1", "9223372036854775807 + 1",
           "2 ** 63", "3 ** 40", kMin + " | abs", "[9223372036854775807, 1] | sum"}) {
    SCOPED_TRACE(expr);
    EXPECT_THAT(ErrorOf("{{ " + expr + " }}"), HasSubstr(overflow));
  }
  auto r =
      RenderSmall("{{ " + kMin + " % -1 }} {{ " + kMin + " // 1 }} {{ -7 // 2 }} {{ -7 % 2 }} " +
                  "{{ 2 ** 62 }} {{ " + kMin + " is divisibleby(-1) }} {{ 7 // -1 }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "0 -9223372036854775808 -4 1 4611686018427387904 True -7");
  EXPECT_THAT(ErrorOf("{{ 0 ** -1 }}"), HasSubstr("0.0 cannot be raised to a negative power"));
  EXPECT_THAT(ErrorOf("{{ 1 // 0 }}"), HasSubstr("integer division or modulo by zero"));
}

TEST(JinjaHostileTest, FloatToIntConversionsAreChecked) {
  EXPECT_THAT(ErrorOf("{{ 1e300 | int }}"), HasSubstr("integer overflow"));
  EXPECT_THAT(ErrorOf("{{ '1e300' | int }}"), HasSubstr("integer overflow"));
  EXPECT_THAT(ErrorOf("{{ '%d' % 1e300 }}"), HasSubstr("integer overflow"));
  auto r = RenderSmall(
      "{{ 'nan' | int(7) }} {{ '99' | int(base=99) }} {{ 42.9 | int }} "
      "{{ '1e999' | float }} {{ 'x' | float(2.0) }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "7 99 42 inf 2.0");  // an invalid base falls back to int(float(x)), as in jinja2
}

TEST(JinjaHostileTest, RangesSlicesAndRepeatsWithExtremeIntegers) {
  auto r = RenderSmall(
      "{{ range(9223372036854775800, 9223372036854775807, 5) | list }} "
      "{{ range(-9223372036854775800, -9223372036854775807 - 1, -7) | list | length }} "
      "{{ [1, 2, 3][::9223372036854775807] }} {{ 'abc'[::-9223372036854775807 - 1] }} "
      "{{ [1, 2, 3][-9223372036854775807 - 1:9223372036854775807] }} "
      "{{ ('' * 1000000000000000000) | length }} {{ ([] * 1000000000000000000) | length }} "
      "{{ 'ab' * -5 }}|{{ 'abc'[-9223372036854775807 - 1] is defined }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "[9223372036854775800, 9223372036854775805] 2 [1] c [1, 2, 3] 0 0 |False");
  EXPECT_THAT(ErrorOf("{{ 'ab' * 9223372036854775807 }}"), HasSubstr("exceeds the limit"));
  EXPECT_THAT(ErrorOf("{{ [1, 2] * 4611686018427387904 }}"), HasSubstr("exceeds the limit"));
}

// ---- Work and size budgets ----

TEST(JinjaHostileTest, ExponentialMacroRunsOutOfSteps) {
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}\n"
      "{{ f(60) }}");
  EXPECT_THAT(error, MatchesRegex("t:1:[0-9]+: render exceeded 10000000 steps"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(JinjaHostileTest, HundredMillionLoopIterationsRunOutOfSteps) {
  const std::string error =
      ErrorOf("{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
              NoVariables(), Small());
  EXPECT_THAT(error, HasSubstr("render exceeded 200000 steps"));
}

TEST(JinjaHostileTest, DoublingStringsAndListsHitTheSizeLimits) {
  EXPECT_THAT(ErrorOf("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              HasSubstr("bytes exceeds the limit of 33554432 bytes"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                      "{% set ns.s = ns.s + ns.s %}{% endfor %}"),
              HasSubstr("exceeds the limit"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
                      "{% set ns.l = ns.l + ns.l %}{% endfor %}"),
              HasSubstr("items exceeds the limit of 1000000 items"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
                      "{% set ns.l = ns.l * 2 %}{% endfor %}"),
              HasSubstr("items exceeds the limit"));
}

TEST(JinjaHostileTest, HugeWidthsAndAmplifyingFiltersAreRefusedBeforeAllocating) {
  for (const std::string& expr :
       {"'x' | center(1000000000000)", "'x'.ljust(1000000000000)", "'x'.rjust(1000000000000)",
        "'x'.zfill(1000000000000)", "'x'.center(1000000000000, '-')",
        "'a\\nb' | indent(1000000000000)", "'a\\nb' | indent(1000000000000, true)",
        "[1] | tojson(indent=1000000000000)", "('x' * 1000000).replace('x', 'yyyyyyyyyyyy')",
        "('x' * 100000).replace('', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy')",
        "('{0}' * 100000).format('x' * 1000)", "([('x' * 1000)] * 1000) | join('y' * 100000)",
        "('<' * 500000) | escape"}) {
    SCOPED_TRACE(expr);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THAT(ErrorOf("{{ " + expr + " }}", NoVariables(), Small()),
                HasSubstr("exceeds the limit"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  EXPECT_THAT(ErrorOf("{{ 'x'.center(9, 'ab') }}"), HasSubstr("exactly one character"));
}

TEST(JinjaHostileTest, SplittingIntoTooManyPiecesIsRefused) {
  for (const std::string& expr :
       {"(',' * 100000).split(',')", "(',' * 100000).rsplit(',')", "('a ' * 100000).split()",
        "('\\n' * 100000).splitlines()", "('x' * 100000) | list", "('a ' * 100000) | wordcount"}) {
    SCOPED_TRACE(expr);
    EXPECT_THAT(ErrorOf("{{ " + expr + " }}", NoVariables(), Small()),
                HasSubstr("items exceeds the limit"));
  }
}

TEST(JinjaHostileTest, MemoryHeldAtOnceIsBoundedNotMemoryChurned) {
  jinja::RenderOptions options;
  options.limits.max_memory_bytes = 16 << 20;
  // 100 MB made and dropped again, one iteration at a time: fine.
  auto r = RenderSmall(
      "{% for i in range(100000) %}{% set x = 'y' * 1000 %}{% endfor %}{{ range(3) | list }}",
      NoVariables(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  // 50 MB kept through a namespace: refused.
  EXPECT_THAT(ErrorOf("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}"
                      "{% set ns.l = [ns.l, 'x' * 10000] %}{% endfor %}",
                      NoVariables(), options),
              HasSubstr("render holds more than 16777216 bytes of values"));
}

TEST(JinjaHostileTest, RenderedOutputIsBounded) {
  EXPECT_THAT(ErrorOf("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"),
              HasSubstr("render output exceeds 33554432 bytes"));
  EXPECT_THAT(ErrorOf("{% macro m() %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
                      "{% endmacro %}{{ m() }}"),
              HasSubstr("exceeds the limit of 33554432 bytes"));
}

TEST(JinjaHostileTest, SharedValuesCannotPrintOrCompareExponentially) {
  // 2^60 elements reachable through 60 levels of sharing.
  const std::string build =
      "{% set ns = namespace(x=[1], y=[1]) %}{% for i in range(60) %}"
      "{% set ns.x = [ns.x, ns.x] %}{% set ns.y = [ns.y, ns.y] %}{% endfor %}";
  for (const std::string& use :
       {"{{ ns.x }}", "{{ ns.x | tojson }}", "{{ ns.x == ns.y }}", "{{ ns.x < ns.y }}",
        "{{ ns.x | string | length }}", "{{ [ns.x, ns.y] | unique | list | length }}"}) {
    SCOPED_TRACE(use);
    const auto start = std::chrono::steady_clock::now();
    const std::string error = ErrorOf(build + use, NoVariables(), Small());
    EXPECT_THAT(error, ::testing::AnyOf(HasSubstr("steps"), HasSubstr("exceeds the limit")));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

TEST(JinjaHostileTest, LongSubstringSearchesAreLinear) {
  // std::string::find is O(n * m) here: 10^11 byte comparisons.
  const auto start = std::chrono::steady_clock::now();
  auto r = RenderSmall(
      "{% set hay = 'a' * 1000000 %}{% set needle = 'a' * 500000 ~ 'b' %}"
      "{{ needle in hay }} {{ hay.find(needle) }} {{ hay.rfind(needle) }} {{ hay.count(needle) }} "
      "{{ hay.split(needle) | length }} {{ hay.rsplit(needle) | length }} "
      "{{ hay.replace(needle, '') | length }} {{ hay.partition(needle)[1] }}|"
      "{{ hay.rpartition(needle)[1] }}|");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "False -1 -1 0 1 1 1000000 ||");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(JinjaHostileTest, CancellationStopsARender) {
  std::atomic<int> polls{0};
  jinja::RenderOptions options;
  options.cancelled = [&polls] { return ++polls >= 3; };
  auto r = RenderSmall(
      "{% for i in range(100000) %}{% for j in range(100) %}{{ i }}{% endfor %}"
      "{% endfor %}",
      NoVariables(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_THAT(std::string(r.status().message()), MatchesRegex("t:1:[0-9]+: render cancelled"));
  EXPECT_EQ(polls.load(), 3);
  // A render that ends before the first poll never asks.
  polls = 0;
  r = RenderSmall("{{ 1 + 1 }}", NoVariables(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(polls.load(), 0);
}

// ---- Deep values ----

TEST(JinjaHostileTest, DeepValuesBuiltInATemplateFailAndAreFreedOnASmallStack) {
  const std::string build =
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}";
  for (const std::string& use : {"{{ ns.x }}", "{{ ns.x | tojson }}", "{{ [ns.x] == [[ns.x]] }}",
                                 "{{ [ns.x] < [[ns.x]] }}", "{{ ns.x | string }}"}) {
    SCOPED_TRACE(use);
    // On a 256 KB stack the stack guard may stop tojson first.
    EXPECT_THAT(ErrorOf(build + use),
                ::testing::AnyOf(HasSubstr("value nested deeper than 512 levels"),
                                 HasSubstr("value nested too deeply for this thread's stack")));
  }
  // Built and dropped: freeing 100,000 levels must not recurse either.
  auto r = RenderSmall(build + "{{ ns.x | length }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "1");
}

TEST(JinjaHostileTest, CyclesThroughNamespacesPrintAsErrors) {
  EXPECT_THAT(ErrorOf("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}"),
              HasSubstr("value nested deeper than"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace() %}{% set ns.l = [ns] %}{{ ns.l }}"),
              HasSubstr("value nested deeper than"));
  // Comparing a cycle with itself is identity, as in Python.
  auto r = RenderSmall("{% set ns = namespace() %}{% set ns.l = [ns] %}{{ ns.l == ns.l }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "True");
}

TEST(JinjaHostileTest, DeepRecursionThroughMacrosIsBounded) {
  const std::string source =
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(100000) }}";
  // On an 8 MB stack the depth limit stops it; on 256 KB possibly the stack
  // guard first. Either way it is an error, not an overflow.
  EXPECT_THAT(ErrorOf(source), HasSubstr("nested"));
  auto tmpl = ChatTemplate::Compile(source, "t");
  ASSERT_TRUE(tmpl.ok());
  auto r = (*tmpl)->RenderOrdered(nlohmann::ordered_json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("rendering nested deeper than 384 levels"));
  // Moderate recursion, as schema-walking macros do, still works on 256 KB.
  auto ok = RenderSmall(
      "{% macro f(n) %}{% if n > 0 %}{% for i in [1] %}{{ f(n - 1) }}{% endfor %}{% endif %}"
      "{{ n }}{% endmacro %}{{ f(30) }}");
  ASSERT_TRUE(ok.ok()) << ok.status();
}

TEST(JinjaHostileTest, DeepJsonContextIsRefusedBeforeConversion) {
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 100'000; ++i) deep = nlohmann::ordered_json::array({std::move(deep)});
  auto tmpl = ChatTemplate::Compile("{{ x | tojson }}", "t");
  ASSERT_TRUE(tmpl.ok());
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["x"] = std::move(deep);  // moved: copying it would recurse 100,000 deep
  ASSERT_TRUE(testing::RunOnSmallStack([&] {
    auto r = (*tmpl)->RenderOrdered(context);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("nest deeper than 512 levels"));
    nlohmann::json plain = nlohmann::json::object();
    plain["x"] = nlohmann::json::array();
    auto* leaf = &plain["x"];
    for (int i = 0; i < 100'000; ++i) {
      leaf->push_back(nlohmann::json::array());
      leaf = &(*leaf)[0];
    }
    auto r2 = (*tmpl)->Render(plain);
    ASSERT_FALSE(r2.ok());
    EXPECT_THAT(std::string(r2.status().message()), HasSubstr("nests deeper than 512 levels"));
  }));
  // At the JSON limit (what the C ABI admits) it renders.
  nlohmann::ordered_json ok = nlohmann::ordered_json::array();
  for (int i = 1; i < limits::kMaxJsonDepth; ++i)
    ok = nlohmann::ordered_json::array({std::move(ok)});
  ASSERT_TRUE(testing::RunOnSmallStack([&] {
    auto r = (*tmpl)->RenderOrdered({{"x", ok}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->size(), 2u * limits::kMaxJsonDepth);
  }));
}

// ---- JSON from outside ----

TEST(BoundedJsonTest, NestingIsRefusedBeforeParsing) {
  const std::string deep = Repeat("[", 100'000) + Repeat("]", 100'000);
  ASSERT_TRUE(testing::RunOnSmallStack([&] {
    auto j = ParseBoundedJson<nlohmann::ordered_json>(deep, "parameters_json");
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(j.status().message(),
              "parameters_json: JSON nested deeper than 256 levels at byte 256");
  }));
  const int n = limits::kMaxJsonDepth;
  EXPECT_TRUE(ParseBoundedJson<nlohmann::json>(Repeat("[", n) + Repeat("]", n), "x").ok());
  EXPECT_FALSE(
      ParseBoundedJson<nlohmann::json>(Repeat("{\"a\":", n + 1) + "1" + Repeat("}", n + 1), "x")
          .ok());
  // Brackets inside strings (escaped quotes included) do not nest.
  auto s = ParseBoundedJson<nlohmann::json>("[\"" + Repeat("[{\\\"", 1000) + "\"]", "x");
  ASSERT_TRUE(s.ok()) << s.status();
  auto bad = ParseBoundedJson<nlohmann::json>("{\"a\": tru}", "template_variables_json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              StartsWith("template_variables_json: not valid JSON at byte "));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("syntax error"));
}

TEST(BoundedJsonTest, DocumentDepthOfBuiltValues) {
  nlohmann::json j = 1;
  for (int i = 0; i < 10; ++i) j = nlohmann::json::array({j});
  EXPECT_TRUE(JsonDepthWithin(j, 10));
  EXPECT_FALSE(JsonDepthWithin(j, 9));
  EXPECT_TRUE(JsonDepthWithin(nlohmann::json("x"), 0));
}

}  // namespace
}  // namespace strata
