// Unit tests of the Jinja interpreter behind ChatTemplate. Every expected
// string was produced by transformers' own jinja2 environment
// (_compile_jinja_template: sandboxed, trim_blocks, lstrip_blocks,
// loopcontrols, its tojson) on the same template and variables.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "text/chat_template.h"
#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

StatusOr<std::string> Render(const std::string& source, const std::string& context_json) {
  STRATA_ASSIGN_OR_RETURN(auto tmpl, ChatTemplate::Compile(source, "t"));
  return tmpl->RenderOrdered(nlohmann::ordered_json::parse(context_json));
}

void ExpectRender(const std::string& source, const std::string& context_json,
                  const std::string& expected) {
  auto result = Render(source, context_json);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, expected) << "template: " << source;
}

// Renders and returns the error message (fails the test if it renders).
std::string RenderError(const std::string& source, const std::string& context_json = "{}") {
  auto result = Render(source, context_json);
  EXPECT_FALSE(result.ok()) << "rendered: " << *result;
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(result.status().message());
}

TEST(JinjaTest, IfElifElse) {
  ExpectRender(
      "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% "
      "endfor %}",
      "{}", "one,two,many,");
}

TEST(JinjaTest, ForLoopVariables) {
  ExpectRender(
      "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.first }}/{{ "
      "loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}",
      "{\"xs\": [\"a\", \"b\", \"c\"]}",
      "1/0/3/True/False/3//b;2/1/2/False/False/3/a/c;3/2/1/False/True/3/b/;");
}

TEST(JinjaTest, ForElse) {
  ExpectRender(
      "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in u %}x{% else %}undef{% endfor %}",
      "{}", "empty|undef");
}

TEST(JinjaTest, ForItems) {
  ExpectRender(
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
      "{\"d\": {\"z\": 1, \"a\": [1, 2], \"m\": null}}", "z=1;a=[1, 2];m=None;zam");
}

TEST(JinjaTest, ForFilterAndLoopLength) {
  ExpectRender(
      "{% for x in range(10) if x is odd %}{{ x }}{{ '' if loop.last else ',' }}{% endfor %}", "{}",
      "1,3,5,7,9");
}

TEST(JinjaTest, BreakContinue) {
  ExpectRender(
      "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% "
      "endif %}{{ x }}{% endfor %}",
      "{}", "01345");
}

TEST(JinjaTest, LoopScopeDoesNotLeak) {
  ExpectRender(
      "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{{ x }}{% endfor %}{{ x }}",
      "{}", "0100110120");
}

TEST(JinjaTest, NamespaceAssignment) {
  ExpectRender(
      "{% set ns = namespace(count=0, found=false) %}{% for m in ms %}{% set ns.count = ns.count + "
      "1 %}{% if m == 'b' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ "
      "ns.found }}",
      "{\"ms\": [\"a\", \"b\", \"c\"]}", "3 True");
}

TEST(JinjaTest, SetTupleAndBlock) {
  ExpectRender(
      "{% set a, b = [1, 'two'] %}{{ a }}{{ b }}{% set blk %}  inner {{ a }}{% endset %}[{{ blk "
      "}}]",
      "{}", "1two[  inner 1]");
}

TEST(JinjaTest, Macro) {
  ExpectRender(
      "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} "
      "{{ greet('Bob', punct='?') }} {{ greet(punct='.', name='Cy') }}",
      "{}", "Hi Ann! Hi Bob? Hi Cy.");
}

TEST(JinjaTest, MacroCaller) {
  ExpectRender(
      "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') "
      "%}bold{% endcall %}",
      "{}", "<b>bold</b>");
}

TEST(JinjaTest, WhitespaceControl) {
  ExpectRender("a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e", "{}", "abc d e");
}

TEST(JinjaTest, TrimAndLstripBlocks) {
  ExpectRender("<ul>\n    {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>\n",
               "{}", "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");
}

TEST(JinjaTest, PlusDisablesLstrip) {
  ExpectRender("x\n    {%+ if true %}y{% endif %}\n", "{}", "x\n    y");
}

TEST(JinjaTest, CommentsAreRemoved) {
  ExpectRender("a\n  {# note #}\nb{#- trimmed -#}  c", "{}", "a\nbc");
}

TEST(JinjaTest, RawBlock) {
  ExpectRender("{% raw %}{{ not evaluated }}{% endraw %}", "{}", "{{ not evaluated }}");
}

TEST(JinjaTest, TrailingNewlineDropped) { ExpectRender("line\n", "{}", "line"); }

TEST(JinjaTest, PrintsPythonValues) {
  ExpectRender(
      "{{ 1.0 }} {{ 2.5e-7 }} {{ 1e20 }} {{ True }} {{ none }} {{ [1, 'a', None, False, 1.5] }} {{ "
      "{'k': 'v', 'n': (1, 2)} }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}",
      "{}",
      "1.0 2.5e-07 1e+20 True None [1, 'a', None, False, 1.5] {'k': 'v', 'n': (1, 2)} 2.5 3 2 "
      "1024");
}

TEST(JinjaTest, StringReprQuotes) {
  ExpectRender("{{ [\"it's\", 'say \"hi\"', 'a\\nb', 'x\\\\y'] }}", "{}",
               "[\"it's\", 'say \"hi\"', 'a\\nb', 'x\\\\y']");
}

TEST(JinjaTest, UndefinedPrintsEmpty) {
  ExpectRender(
      "[{{ missing }}][{{ d.nope }}][{{ missing | length }}][{{ d.nope is defined }}][{{ missing "
      "is undefined }}]",
      "{\"d\": {}}", "[][][0][False][True]");
}

TEST(JinjaTest, Concat) {
  ExpectRender(
      "{{ 'a' ~ 1 ~ none ~ missing ~ [1] }}|{{ 'x' + 'y' }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}", "{}",
      "a1None[1]|xy|ababab|[1, 2]");
}

TEST(JinjaTest, InOperator) {
  ExpectRender(
      "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 3 not "
      "in [1] }}",
      "{}", "True True True True True");
}

TEST(JinjaTest, Comparisons) {
  ExpectRender(
      "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 3 }} {{ 1 != 2 "
      "}}",
      "{}", "True True True True False True");
}

TEST(JinjaTest, AndOrReturnOperands) {
  ExpectRender("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }}", "{}",
               "x b [] True");
}

TEST(JinjaTest, ConditionalExpression) {
  ExpectRender("{{ 'yes' if x else 'no' }} {{ 'yes' if not x else 'no' }} [{{ 'v' if false }}]",
               "{\"x\": 1}", "yes no []");
}

TEST(JinjaTest, Slicing) {
  ExpectRender(
      "{{ 'abcdef'[::-1] }} {{ 'abcdef'[1:3] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3][-2:] }} {{ "
      "'h\xc3"
      "\xa9"
      "llo'[1:4] }} {{ 'abc'[-1] }} {{ xs[::-1] }}",
      "{\"xs\": [1, 2, 3]}",
      "fedcba bc [1, 3] [2, 3] \xc3"
      "\xa9"
      "ll c [3, 2, 1]");
}

TEST(JinjaTest, StringMethods) {
  ExpectRender(
      "{{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ "
      "'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a.b.c'.rsplit('.', 1) }}|{{ "
      "'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Hello'.upper() }}{{ "
      "'Hello'.lower() }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'abcb'.find('b') }}|{{ "
      "'abcb'.count('b') }}|{{ 'hello world'.title() }}|{{ '{} and {}'.format(1, 'x') }}",
      "{}",
      "x|a|hi\n|['a', 'b', '', 'c']|['a', 'b']|['a.b', 'c']|True|True|HELLOhello|bXb|1|2|Hello "
      "World|1 and x");
}

TEST(JinjaTest, ThinkSplitLikeQwen) {
  ExpectRender(
      "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ "
      "c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
      "{\"c\": \"<think>\\nreason\\n</think>\\n\\nanswer\"}", "answer|reason");
}

TEST(JinjaTest, DictMethods) {
  ExpectRender(
      "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {{ d.keys() | list }} {{ d.values() "
      "| list }} {{ d['a'] }} {{ d.a }}",
      "{\"d\": {\"a\": 1, \"b\": [2]}}", "1 None 5 ['a', 'b'] [1, [2]] 1 1");
}

TEST(JinjaTest, ToJsonLikeTransformers) {
  ExpectRender(
      "{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(sort_keys=true) }}\n{{ v | "
      "tojson(separators=(',', ':')) }}\n{{ v | tojson(ensure_ascii=true) }}\n{{ {} | "
      "tojson(indent=2) }}{{ [] | tojson }}",
      "{\"v\": {\"z\": \"\xc3"
      "\xa9"
      "\\\"\\\\\\n\\t<>&\", \"a\": [1, 2.5, 1.0, true, null, {}], \"emoji\": \"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\"}}",
      "{\"z\": \"\xc3"
      "\xa9"
      "\\\"\\\\\\n\\t<>&\", \"a\": [1, 2.5, 1.0, true, null, {}], \"emoji\": \"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\"}\n{\n  \"z\": \"\xc3"
      "\xa9"
      "\\\"\\\\\\n\\t<>&\",\n  \"a\": [\n    1,\n    2.5,\n    1.0,\n    true,\n    null,\n    "
      "{}\n  ],\n  \"emoji\": \"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\"\n}\n{\"a\": [1, 2.5, 1.0, true, null, {}], \"emoji\": \"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\", \"z\": \"\xc3"
      "\xa9"
      "\\\"\\\\\\n\\t<>&\"}\n{\"z\":\"\xc3"
      "\xa9"
      "\\\"\\\\\\n\\t<>&\",\"a\":[1,2.5,1.0,true,null,{}],\"emoji\":\"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\"}\n{\"z\": \"\\u00e9\\\"\\\\\\n\\t<>&\", \"a\": [1, 2.5, 1.0, true, null, {}], \"emoji\": "
      "\"\\ud83d\\udc4d\"}\n{}[]");
}

TEST(JinjaTest, Filters) {
  ExpectRender(
      "{{ '  x  ' | trim }}|{{ [3, 1, 2] | length }}|{{ [3, 1, 2] | first }}|{{ [3, 1, 2] | last "
      "}}|{{ [1, 2] | join(', ') }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ missing | "
      "default('dflt') }}|{{ '' | default('e', true) }}|{{ 12 | string }}|{{ '42' | int + 1 }}|{{ "
      "'x' | int }}|{{ 'abc' | list }}|{{ 'hello' | capitalize }}|{{ 'aXbX' | replace('X', '-') "
      "}}|{{ [3, 1, 2] | sort }}|{{ [1, 2, 2, 1] | unique | list }}|{{ [1, 2] | reverse | list "
      "}}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ [1, 2, 3] | sum }}|{{ [4, 9, 2] | max }}{{ [4, "
      "9, 2] | min }}",
      "{}",
      "x|3|3|2|1, 2|AB|ab|dflt|e|12|43|0|['a', 'b', 'c']|Hello|a-b-|[1, 2, 3]|[1, 2]|[2, "
      "1]|3|2.57|6|92");
}

TEST(JinjaTest, SelectAndMap) {
  ExpectRender(
      "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ "
      "ms | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list }}|{{ ms | "
      "selectattr('tool') | list | length }}|{{ ['a', 'B'] | map('upper') | list }}|{{ [1, 2, 3, "
      "4] | select('even') | list }}|{{ d | items | list }}|{{ d | dictsort }}",
      "{\"ms\": [{\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": "
      "\"a1\", \"tool\": 1}, {\"role\": \"user\", \"content\": \"u2\"}], \"d\": {\"b\": 1, \"a\": "
      "2}}",
      "u1,u2|['assistant']|1|['A', 'B']|[2, 4]|[('b', 1), ('a', 2)]|[('a', 2), ('b', 1)]");
}

TEST(JinjaTest, Tests) {
  ExpectRender(
      "{{ x is defined }} {{ y is defined }} {{ none is none }} {{ 's' is string }} {{ {} is "
      "mapping }} {{ [] is iterable }} {{ 1 is number }} {{ 1.5 is number }} {{ [] is sequence }} "
      "{{ true is boolean }} {{ 1 is boolean }} {{ 3 is odd }} {{ 4 is even }} {{ 'a' is equalto "
      "'a' }} {{ 6 is divisibleby 3 }} {{ x is not none }} {{ false is false }} {{ 0 is false }} "
      "{{ 1 is integer }} {{ true is integer }}",
      "{\"x\": 1}",
      "True False True True True True True True True True False True True True True True True "
      "False True False");
}

TEST(JinjaTest, NoneAttributeIsUndefined) {
  ExpectRender("[{{ n.foo }}][{{ n.foo is defined }}]", "{\"n\": null}", "[][False]");
}

TEST(JinjaTest, NestedDataAccess) {
  ExpectRender(
      "{{ m.tool_calls[0].function.name }} {{ m['tool_calls'][0]['function']['arguments'] | tojson "
      "}}",
      "{\"m\": {\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": "
      "\"x\"}}}]}}",
      "f {\"b\": 1, \"a\": \"x\"}");
}

TEST(JinjaTest, FilterBlockAndWith) {
  ExpectRender(
      "{% filter upper %}abc{{ 1 }}{% endfilter %}{% with a = 5 %}{{ a }}{% endwith %}[{{ a }}]",
      "{}", "ABC15[]");
}

TEST(JinjaTest, StringEscapes) {
  ExpectRender("{{ 'tab\\tnl\\nuni\\u00e9 hex\\x41 \\d' }}", "{}",
               "tab\tnl\nuni\xc3"
               "\xa9"
               " hexA \\d");
}

TEST(JinjaTest, MultilineTagsAndGeneration) {
  ExpectRender("{%- generation -%} g {%- endgeneration -%}\n{{- [1,\n 2] | length }}", "{}", "g2");
}

TEST(JinjaTest, Integers) {
  ExpectRender(
      "{{ 1_000 }} {{ 0x1F }} {{ 3 - 5 }} {{ -2 * 3 }} {{ 1 + 2.0 }} {{ 7 % 2 }} {{ 7.5 // 2 }} {{ "
      "true + 1 }}",
      "{}", "1000 31 -2 -6 3.0 1 3.0 2");
}

// ---- Runtime errors: the same cases raise in transformers (message noted). ----

TEST(JinjaErrorTest, RaiseExceptionReportsPosition) {
  // transformers: TemplateError: bad role
  EXPECT_EQ(RenderError("line1\n  {{ raise_exception('bad role') }}"), "t:2:6: bad role");
}

TEST(JinjaErrorTest, AttributeOfUndefinedRaises) {
  // transformers: UndefinedError: 'missing' is undefined
  EXPECT_EQ(RenderError("{{ missing.attr }}"), "t:1:11: 'missing' is undefined");
}

TEST(JinjaErrorTest, StringPlusIntRaises) {
  // transformers: TypeError: can only concatenate str (not "int") to str
  EXPECT_EQ(RenderError("{{ 'a' + 1 }}"), "t:1:4: can only concatenate str (not \"int\") to str");
}

TEST(JinjaErrorTest, CallingMissingAttributeRaises) {
  // transformers: UndefinedError: 'dict object' has no attribute 'nope'
  EXPECT_EQ(RenderError("{{ d.nope() }}", R"({"d": {}})"),
            "t:1:5: 'dict object' has no attribute 'nope'");
}

TEST(JinjaErrorTest, IteratingNoneRaises) {
  // transformers: TypeError: 'NoneType' object is not iterable
  EXPECT_EQ(RenderError("\n{% for x in n %}{% endfor %}", R"({"n": null})"),
            "t:2:13: 'NoneType' object is not iterable");
}

TEST(JinjaErrorTest, ErrorInsideMacroPointsIntoTheMacro) {
  EXPECT_EQ(RenderError("{% macro m() %}\n  {{ 1 + 'x' }}\n{% endmacro %}{{ m() }}"),
            "t:2:6: unsupported operand type(s) for +: 'int' and 'str'");
}

TEST(JinjaErrorTest, IntegerOverflowIsAnErrorNotAWrap) {
  // Python would produce a big integer; we refuse instead of printing garbage.
  EXPECT_THAT(RenderError("{{ 2 ** 64 }}"), HasSubstr("integer overflow"));
  EXPECT_THAT(RenderError("{{ 9223372036854775807 + 1 }}"), HasSubstr("integer overflow"));
  ExpectRender("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 3 ** 0 }}", "{}",
               "4611686018427387904 -9223372036854775808 1");
}

// ---- Syntax errors: transformers raises TemplateSyntaxError on each. ----

TEST(JinjaSyntaxErrorTest, UnclosedIf) {
  EXPECT_THAT(RenderError("{% if x %}\nabc"), StartsWith("t:2:4: unexpected end of template"));
}

TEST(JinjaSyntaxErrorTest, UnknownTag) {
  EXPECT_EQ(RenderError("ok\n  {% frobnicate %}"), "t:2:6: Encountered unknown tag 'frobnicate'.");
}

TEST(JinjaSyntaxErrorTest, IncompleteExpression) {
  EXPECT_EQ(RenderError("{{ 1 + }}"), "t:1:8: unexpected end of print statement");
}

TEST(JinjaSyntaxErrorTest, UnclosedVariable) {
  EXPECT_THAT(RenderError("a {{ x"), StartsWith("t:1:3: unexpected end of template"));
}

TEST(JinjaSyntaxErrorTest, UnbalancedBracket) {
  EXPECT_EQ(RenderError("{{ (1 + 2 }}"), "t:1:11: unexpected '}', expected ')'");
}

TEST(JinjaSyntaxErrorTest, ColumnsCountCodePoints) {
  // "é" is two bytes but one column.
  EXPECT_EQ(RenderError("é {% bogus %}"), "t:1:6: Encountered unknown tag 'bogus'.");
}

TEST(JinjaSyntaxErrorTest, UnknownFilterOrTestFailsAtCompileTime) {
  // transformers: TemplateAssertionError when compiling.
  auto filter = ChatTemplate::Compile("{{ x | nosuch }}", "t");
  ASSERT_FALSE(filter.ok());
  EXPECT_EQ(filter.status().message(), "t:1:8: No filter named 'nosuch'.");
  auto test = ChatTemplate::Compile("\n{{ x is nosuch }}", "t");
  ASSERT_FALSE(test.ok());
  EXPECT_EQ(test.status().message(), "t:2:6: No test named 'nosuch'.");
  // A loop or macro body inside an `if` is not exempt.
  EXPECT_FALSE(ChatTemplate::Compile(
                   "{% if true %}{% for a in [1] %}{{ a | nosuch }}{% endfor %}{% endif %}", "t")
                   .ok());
  EXPECT_FALSE(ChatTemplate::Compile("{% macro m() %}{{ 1 | nosuch }}{% endmacro %}", "t").ok());
}

TEST(JinjaSyntaxErrorTest, UnknownFilterInsideIfFailsOnlyWhenRun) {
  // transformers renders these ("ok") and raises only when the call runs.
  ExpectRender("{% if x %}{{ x | nosuch }}{% endif %}ok", "{}", "ok");
  ExpectRender("{{ (x | nosuch) if x else 'ok' }}", "{}", "ok");
  EXPECT_THAT(RenderError("{% if x is nosuch %}{% endif %}"), HasSubstr("No test named 'nosuch'"));
}

// ---- Value formatting helpers. ----

TEST(JinjaValueTest, PythonFloatRepr) {
  using jinja::FormatPythonFloat;
  EXPECT_EQ(FormatPythonFloat(1.0), "1.0");
  EXPECT_EQ(FormatPythonFloat(0.1), "0.1");
  EXPECT_EQ(FormatPythonFloat(1e16), "1e+16");
  EXPECT_EQ(FormatPythonFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatPythonFloat(1.5e-5), "1.5e-05");
  EXPECT_EQ(FormatPythonFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatPythonFloat(-2.5), "-2.5");
  EXPECT_EQ(FormatPythonFloat(123456.789), "123456.789");
}

// ---- ChatTemplate API. ----

TEST(ChatTemplateTest, DefaultsMatchApplyChatTemplate) {
  // apply_chat_template always passes tools/documents (None) and
  // add_generation_prompt (False).
  ExpectRender("{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}",
               R"({"messages": []})", "True True False");
}

TEST(ChatTemplateTest, PlainJsonContextRenders) {
  auto tmpl = ChatTemplate::Compile(
      "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}", "t");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  nlohmann::json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto out = (*tmpl)->Render(ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "user:hi;");
}

TEST(ChatTemplateTest, FromDirectoryMissingTemplateIsAnError) {
  auto tmpl = ChatTemplate::FromDirectory("/nonexistent/dir");
  EXPECT_FALSE(tmpl.ok());
}

TEST(ChatTemplateTest, FromDirectorySuppliesSpecialTokens) {
  // DeepSeek-V3 stores bos_token as an AddedToken object {content: ...}.
  auto tmpl = ChatTemplate::FromDirectory(STRATA_TEXT_DATA_DIR "/tokenizers/deepseek_v3");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                {"add_generation_prompt", true}};
  auto out = (*tmpl)->RenderOrdered(ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>");
  // The context overrides a special token.
  ctx["bos_token"] = "<B>";
  out = (*tmpl)->RenderOrdered(ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, StartsWith("<B><｜User｜>"));
}

}  // namespace
}  // namespace strata
