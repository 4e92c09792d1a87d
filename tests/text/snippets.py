"""Small templates probing Jinja semantics one feature at a time.

gen_chat_cases.py renders each through transformers' apply_chat_template
(chat_template=SNIPPET) with SNIPPET_VARS as extra variables; the live C++
test must match byte for byte (or raise when transformers raises).
"""

SNIPPET_VARS = {
    "s": "  Héllo Wörld, ÄÖÜ straße  ",
    "t": "a,b,,c",
    "n": 7,
    "neg": -7,
    "f": 2.5,
    "l": [3, 1, 2],
    "words": ["banana", "Apple", "cherry", "apple"],
    "d": {"b": 1, "a": 2, "c": None},
    "people": [{"name": "Ann", "age": 31, "tags": ["x"]}, {"name": "bob", "age": 25},
               {"name": "Cy", "age": 31, "tags": []}],
    "nested": {"k": [1, {"z": "ü\"'\\"}], "e": {}, "f": 1.0, "g": 1e-7, "h": 1e16, "i": -0.0},
}

SNIPPETS = [
    # arithmetic and number formatting
    "{{ n // 2 }} {{ neg // 2 }} {{ neg % 3 }} {{ n % -3 }} {{ 2 ** 10 }} {{ 1 / 3 }} {{ 0.1 + 0.2 }} {{ n / 7 }}",
    "{{ f * 2 }} {{ f - 0.5 }} {{ -f }} {{ n - f }} {{ true + true }} {{ 10 ** 2 }} {{ 7.5 % 2 }} {{ -7.5 // 2 }}",
    "{{ 1e100 }} {{ 12345678901234567 }} {{ 0.000123 }} {{ 1.5e300 * 10 }} {{ 3.0 == 3 }} {{ (0.5).__class__ is defined }}",
    # strings
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' H') }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}",
    "{{ s.split() }}|{{ s.split(' ') }}|{{ t.split(',') }}|{{ t.split(',', 1) }}|{{ t.rsplit(',', 2) }}|{{ s.split(None, 1) }}|{{ s.rsplit(None, 1) }}",
    "{{ s[2:7] }}|{{ s[::-1] }}|{{ s[-4:] }}|{{ s[100:] }}|{{ s[::3] }}|{{ s[5:1:-1] }}|{{ l[::-1] }}|{{ l[1:] }}|{{ l[-1:-3:-1] }}",
    "{{ s.find('ö') }} {{ s.count('l') }} {{ s.replace('l', 'L', 2) }} {{ s.startswith('  H') }} {{ s.endswith(('x', '  ')) }} {{ 'ab' in s }} {{ s | length }}",
    "{{ 'x'.join(['a', 'b']) }} {{ '-'.join('abc') }} {{ 'a\\tb'.expandtabs is defined }} {{ '%s=%d' % ('k', 5) }} {{ '{0}-{1}-{0}'.format('a', 'b') }}",
    "{{ 'Hello World'.capitalize() }} {{ 'straße'.upper() }} {{ '  '.isspace() }} {{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'Ab'.islower() }}",
    "{{ 'line1\\nline2\\r\\nline3'.splitlines() }} {{ 'a:b:c'.partition(':') }} {{ 'x'.center(7, '*') }} {{ '5'.zfill(3) }} {{ 'ab'.ljust(4, '.') }}",
    # filters
    "{{ s | trim }}|{{ s | trim('  H') }}|{{ s | upper }}|{{ s | capitalize }}|{{ s | title }}|{{ s | wordcount }}|{{ s | replace('ö', 'o') }}",
    "{{ l | sort }} {{ l | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ words | unique | list }} {{ words | max }} {{ words | min }}",
    "{{ people | sort(attribute='age') | map(attribute='name') | join(',') }} {{ people | map(attribute='tags', default='-') | list }} {{ people | sum(attribute='age') }}",
    "{{ people | selectattr('age', 'equalto', 31) | map(attribute='name') | list }} {{ people | rejectattr('tags') | map(attribute='name') | list }} {{ people | selectattr('tags', 'defined') | list | length }}",
    "{{ d | dictsort }} {{ d | dictsort(by='value') is defined }} {{ d | items | list }} {{ d | list }} {{ d | length }} {{ d | first }} {{ d.items() | list | last }}",
    "{{ l | first }} {{ l | last }} {{ 'abc' | first }} {{ 'abc' | last }} {{ l | join }} {{ l | join('+') }} {{ people | join(', ', attribute='name') }}",
    "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('>', blank=true) }}",
    "{{ '3.7' | float }} {{ '3.7' | int }} {{ 'x' | int(5) }} {{ 3.99 | int }} {{ '0x1A' | int(0, 16) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.345 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ -3 | abs }}",
    "{{ l | string }} {{ none | string }} {{ d | string }} {{ 5 | string | length }} {{ missing | default('dflt') }} {{ none | default('dflt') }} {{ none | default('dflt', true) }} {{ missing | d }}",
    "{{ l | reverse | list }} {{ 'abc' | reverse }} {{ l | list | length }} {{ 'héllo' | list }} {{ l | select('odd') | list }} {{ l | reject('odd') | list }} {{ words | map('upper') | list }}",
    "{{ 'x' | center(9) }}|{{ '<b>&\"' | e }}|{{ '<b>' | safe }}|{{ '%s-%s' | format('a', 1) }}|{{ people | first | attr('name') is defined }}",
    # tojson in all its options
    "{{ nested | tojson }}\n{{ nested | tojson(indent=2) }}\n{{ nested | tojson(indent='\\t', sort_keys=true) }}\n{{ nested | tojson(separators=(',', ':')) }}\n{{ nested | tojson(ensure_ascii=true) }}",
    "{{ people | tojson(indent=0) }}|{{ 'é\\u2028\\x7f\\x00' | tojson }}|{{ 'é😀' | tojson(ensure_ascii=true) }}|{{ none | tojson }}|{{ (1, 2) | tojson }}|{{ {1: 'a', true: 'b'} | tojson }}",
    "{{ missing | tojson }}",
    # printing Python values
    "{{ nested }} {{ people[0] }} {{ (1,) }} {{ () }} {{ ('a', \"b'c\") }} {{ [none, true, 1.0, -0.0] }} {{ {'k': {'j': []}} }}",
    "{{ ['it\\'s', 'a\"b', 'both\\'\"', 'nl\\n', 'tab\\t', 'bs\\\\', 'é', '\\x01'] }}",
    # tests
    "{{ n is odd }} {{ n is divisibleby 7 }} {{ l is sequence }} {{ d is mapping }} {{ s is string }} {{ f is float }} {{ n is integer }} {{ true is number }} {{ none is none }} {{ missing is undefined }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ n is gt 3 }} {{ n is lt 3 }} {{ n is ge 7 }} {{ n is ne 7 }} {{ 2 is in l }} {{ l is iterable }} {{ n is iterable }} {{ d is callable }} {{ d.get is callable }}",
    "{{ n is sameas 7 }} {{ none is sameas none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 'x' is eq 'x' }} {{ 1 is boolean }}",
    # comparisons and membership
    "{{ 'a' < 'B' }} {{ [1, 2] < [1, 2, 0] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ 1 == true }} {{ 'b' in d }} {{ 2 in d.values() | list }} {{ 1 < 2 > 1 }}",
    "{{ 'a' in ['a'] and 'z' not in 'abc' or false }} {{ not none }} {{ not [] }} {{ [] or {} or 'last' }} {{ 0 and 1 }} {{ (n > 5) and 'big' or 'small' }}",
    # control flow and scoping
    "{% for x in l %}{{ loop.cycle('a', 'b') }}{{ loop.revindex0 }}{% if loop.changed is defined %}?{% endif %}{% endfor %}",
    "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}|{{ 'ab  c  '.split(None, 1) }}{{ '  ab  c'.rsplit(None, 1) }}{{ 'a  '.split(None, 1) }}",
    "{% for x in [] %}{% else %}none{% endfor %}{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a * b }}{% endfor %}",
    "{% for p in people if p.age > 30 %}{{ p.name }}{{ loop.index }}/{{ loop.length }}{% endfor %}{% for x in range(5, 0, -2) %}{{ x }}{% endfor %}{{ range(3) | list }}",
    "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}{% for i in [1] %}{% set x = 3 %}{{ x }}{% endfor %}{{ x }}{% with %}{% set x = 4 %}{{ x }}{% endwith %}{{ x }}",
    "{% set ns = namespace(items=[], total=0) %}{% for p in people %}{% set ns.items = ns.items + [p.name | lower] %}{% set ns.total = ns.total + p.age %}{% endfor %}{{ ns.items }} {{ ns.total }}",
    "{% macro row(a, b=2, c=none) %}[{{ a }}|{{ b }}|{{ c }}|{{ varargs }}|{{ kwargs }}]{% endmacro %}{{ row(1) }}{{ row(1, 3) }}{{ row(1, c=5) }}{{ row(1, 2, 3, 4, 5) }}{{ row(1, z=9) }}",
    "{% macro outer() %}{{ caller('x') }}{% endmacro %}{% call(v) outer() %}got {{ v }}{% endcall %}{% filter upper %}shout {{ n }}{% endfilter %}{% set b | trim %}  padded  {% endset %}[{{ b }}]",
    "{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{{ raise_exception('custom failure ' ~ n) }}",
    # whitespace control
    "a\n  {% if true %}\n    b\n  {% endif %}\n  c\n{# comment #}\n  {%- if true -%}\n  d  \n{%- endif %}\n{{ 'e' }}  \n  {{- 'f' -}}  \n  g",
    "x {%+ if true %} y {% endif +%} z\n  {%+ if true %}\nw{% endif %}\n{% raw %}  {{ raw }}  {% endraw %}\n  {%- raw -%}  r2  {%- endraw %}  end",
    "line one\n    {% for i in l %}\n    item {{ i }}\n    {% endfor %}\n\n    {#- trimmed comment -#}\n    tail\n",
    "{{ messages[0].content }}|{{ messages | length }}|{{ messages[0]['role'] }}|{{ messages[-1].nope is defined }}|{{ tools }}|{{ add_generation_prompt }}|{{ documents }}",
    # idioms of real chat templates
    "{%- for message in messages %}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}[{{ message.role | capitalize }}]{{ message['content'] | trim }}{{ '\n' if not loop.last }}{% endfor %}",
    "{% set sys = messages | selectattr('role', 'equalto', 'system') | list %}{{ sys | length }}{{ (sys | first).content if sys else 'no system' }}|{{ messages | map(attribute='role') | join('>') }}",
    "{% for a in l %}{% set outer = loop %}{% for b in l %}{{ outer.index }}{{ loop.index }}{{ ',' if not loop.last }}{% endfor %};{% endfor %}",
    "{% macro walk(v, depth=0) %}{% if v is mapping %}{% for k, x in v.items() %}{{ ' ' * depth }}{{ k }}:{{ walk(x, depth + 1) }}{% endfor %}{% elif v is iterable and v is not string %}[{% for x in v %}{{ walk(x, depth + 1) }}{% endfor %}]{% else %}{{ v }};{% endif %}{% endmacro %}{{ walk(nested) }}",
    "{{ 'a' ~ none ~ 1.0 ~ [1] ~ {'k': 1} }}|{{ ('x' if false) ~ 'y' }}|{{ s.strip() ~ '!' }}",
    "{{ 'a' + ('b' if false) }}",
    "{% if '</think>' in s %}x{% else %}{{ s.split('ö', 1)[1] }}|{{ s.split('zz')[-1] }}{% endif %}",
    "{%- if tools is not none and tools is iterable %}tools{% elif not tools %}no tools{% endif %}|{{ tools | length if tools else 0 }}",
    "{%- set content = messages[0]['content'] | string %}{{ content }}{{ messages[0].get('reasoning_content', 'none') }}{{ messages[0].get('missing') is none }}",
    "{{ people[0].tags[0] }}{{ people[1].tags is defined }}{{ people[1].tags | default([]) | length }}{{ people[-1]['name'] }}{{ people[5] is defined }}",
    "{% set x = {'k': 'v'} %}{{ x.k }}{{ x['k'] }}{{ x.get('k') }}{{ x.keys() | list }}{{ x | tojson }}{% set y = [1, 2] + [3] %}{{ y }}{{ y | tojson }}",
    "{{ d.items() }}|{{ d.keys() }}|{{ d.values() }}|{{ d.items() | list }}|{{ d.keys() | first }}|{{ d.values()[0] is defined }}|{{ 'b' in d.keys() }}",
    "{{ d.items() | tojson }}",
    "{{ '\u2028'.split() }}{{ 'a\x85b'.split() }}{{ 'x\u00a0y'.strip() }}{{ '\u3000x\u3000'.strip() | length }}",
    "{{ 'Łódź ąęśćżń ŐŰ ς σ Ωμέγα Ёлка ǅ' | upper }}|{{ 'ŁÓDŹ ĄĘŚĆŻŃ ŐŰ Σ ЁЛКА' | lower }}|{{ 'ąbc łódź' | title }}|{{ 'ŁÓDŹ' | capitalize }}",
    "{{ 'ΟΔΟΣ ΣΑΣ Σ' | lower }}|{{ 'ﬁne ŉ ǆ' | upper }}|{{ 'ǆemal' | title }}{{ \"o'neil x-ray (ab)[cd]{ef}<gh> 1st\" | title }}{{ \"o'neil x-ray 1st\".title() }}|{{ 'ǆ' | capitalize }}|{{ 'İ' | lower | length }}|{{ 'ᾳ' | upper }}",
    # errors that must match
    "{{ l + 1 }}", "{{ s * s }}", "{{ d.items().x.y }}", "{{ n() }}", "{% for x in n %}{% endfor %}",
    "{{ 1 / 0 }}", "{{ l[1:2:0] }}", "{{ {'a': 1} | items | list | first | first | upper }}{{ 1 | items | list }}",
    "{{ ns.x }}{% set ns.x = 1 %}", "{{ 'a' < 1 }}", "{% set a, b = [1] %}",
]
