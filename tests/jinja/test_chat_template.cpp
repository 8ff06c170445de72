// ChatTemplate (server/jinja/chat_template.h): real chat templates rendered byte-exact against
// transformers' apply_chat_template (tests/server/golden/chat_templates.json, made by
// scripts/make_chat_template_golden.py), and unit tests of the Jinja language whose expected
// values are written by hand from jinja2 3.1's documented behaviour (each checked with jinja2).
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server/jinja/chat_template.h"

using octet::ChatTemplate;
using octet::ChatTemplateError;
using octet::ChatTemplateOptions;
using ojson = nlohmann::ordered_json;

namespace {

ojson load_golden() {
  std::ifstream in(std::string(OCTET_SOURCE_DIR) + "/tests/server/golden/chat_templates.json");
  REQUIRE(in.good());
  return ojson::parse(in);
}

ChatTemplateOptions fixed_now() {
  // Must match FIXED_NOW in scripts/make_chat_template_golden.py: 2025-03-07 14:05:09, a Friday.
  ChatTemplateOptions o;
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 2;
  tm.tm_mday = 7;
  tm.tm_hour = 14;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  tm.tm_wday = 5;
  tm.tm_yday = 65;
  o.now = tm;
  return o;
}

std::string render(const std::string& source, const ojson& context = ojson::object()) {
  return ChatTemplate::parse(source).render(context, fixed_now());
}

// Renders and returns the error; fails the test when rendering succeeds.
ChatTemplateError render_error(const std::string& source, const ojson& context = ojson::object()) {
  try {
    render(source, context);
  } catch (const ChatTemplateError& e) {
    return e;
  }
  FAIL("expected a ChatTemplateError for: " << source);
  return ChatTemplateError(ChatTemplateError::Kind::Render, "", 0);
}

}  // namespace

TEST_CASE("chat templates render byte-exact like transformers", "[chat_template][golden]") {
  const ojson golden = load_golden();
  std::map<std::string, ojson> conversations;
  for (const auto& c : golden["conversations"]) conversations[c["name"].get<std::string>()] = c;
  REQUIRE(golden["templates"].size() >= 10);
  std::size_t checked = 0;
  for (const auto& t : golden["templates"]) {
    const std::string name = t["name"];
    INFO("template " << name << " (" << t["origin"].get<std::string>() << ")");
    const ChatTemplate tmpl = ChatTemplate::parse(t["source"].get<std::string>());
    for (const auto& r : t["renders"]) {
      const ojson& conv = conversations.at(r["conversation"].get<std::string>());
      ojson ctx = ojson::object();
      ctx["messages"] = conv["messages"];
      ctx["tools"] = conv["extra"].contains("tools") ? conv["extra"]["tools"] : ojson(nullptr);
      ctx["documents"] = nullptr;
      ctx["add_generation_prompt"] = r["add_generation_prompt"];
      ctx["bos_token"] = t["bos_token"];
      ctx["eos_token"] = t["eos_token"];
      for (const auto& [k, v] : conv["extra"].items())
        if (k != "tools") ctx[k] = v;
      INFO("conversation " << r["conversation"].get<std::string>() << ", add_generation_prompt "
                           << r["add_generation_prompt"].get<bool>());
      if (r.contains("output")) {
        std::string got;
        try {
          got = tmpl.render(ctx, fixed_now());
        } catch (const ChatTemplateError& e) {
          FAIL("unexpected error: " << e.what());
        }
        CHECK(got == r["output"].get<std::string>());
      } else {
        INFO("expected " << r["error_type"].get<std::string>() << ": " << r["error"].get<std::string>());
        try {
          tmpl.render(ctx, fixed_now());
          FAIL("rendered, but transformers raised");
        } catch (const ChatTemplateError& e) {
          if (r["error_type"] == "TemplateError") {  // raise_exception(message): exact text
            CHECK(e.kind() == ChatTemplateError::Kind::Raised);
            CHECK(e.message() == r["error"].get<std::string>());
          } else {
            CHECK(e.kind() == ChatTemplateError::Kind::Render);
          }
        }
      }
      ++checked;
    }
  }
  CHECK(checked >= 60);
}

TEST_CASE("jinja whitespace control: trim_blocks, lstrip_blocks, - and + markers, comments, raw, newlines", "[chat_template][whitespace]") {
  CHECK(render("a  {%- if true %} b {% endif -%}  c") ==
        "a b c");
  CHECK(render("{% if true %}\nyes\n{% endif %}\nend") ==
        "yes\nend");
  CHECK(render("  {% if true %}\n  x\n  {% endif %}\n") ==
        "  x\n");
  CHECK(render("x   {{- 'a' -}}   y") ==
        "xay");
  CHECK(render("  {%+ if true %}x{% endif %}") ==
        "  x");
  CHECK(render("{% if true +%}\nx{% endif %}") ==
        "\nx");
  CHECK(render("  {{ 'a' }}") ==
        "  a");
  CHECK(render("a {# c #} b") ==
        "a  b");
  CHECK(render("a\n  {# c #}\nb") ==
        "a\nb");
  CHECK(render("a\n  {#- c -#}\n  b") ==
        "ab");
  CHECK(render("{% raw %}{{ x }}{% if %}{% endraw %}") ==
        "{{ x }}{% if %}");
  CHECK(render("a\r\nb\rc") ==
        "a\nb\nc");
  CHECK(render("a\n") ==
        "a");
  CHECK(render("a\n\n") ==
        "a\n");
  CHECK(render("{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}\n") ==
        "  1\n  2\n");
  CHECK(render("{%- for x in [1, 2] -%}\n  {{ x }}\n{%- endfor %}") ==
        "12");
}

TEST_CASE("jinja operators, literals and Python printing of values", "[chat_template][operators]") {
  CHECK(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 % 2 }}") ==
        "7 9 3.5 2.0 3 -4 2 1.5");
  CHECK(render("{{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 2 ** -1 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1.5e3 }} {{ -0.0 }} {{ 1e16 }}") ==
        "1024 64 0.5 0.30000000000000004 1e-05 1500.0 -0.0 1e+16");
  CHECK(render("{{ 'a' ~ 1 ~ none ~ true ~ missing }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ -3|abs }} {{ -(2) }}") ==
        "a1NoneTrue ababab [1, 2, 3] 3 -2");
  CHECK(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 2 >= 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 1.0 }}") ==
        "True False True True True False");
  CHECK(render("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ not 1 == 2 }} {{ not 'x' in 'y' }}") ==
        "True False True True True");
  CHECK(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ [] or none }} {{ '' and 1 }}|") ==
        "x y None |");
  CHECK(render("{{ 'yes' if 0 else 'no' }} {{ 'yes' if 1 }} [{{ 'yes' if 0 }}] {{ 'a' if false else 'b' if true else 'c' }}") ==
        "no yes [] b");
  CHECK(render("{{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 'a'] == [1, 'a'] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ (1, 2) == [1, 2] }}") ==
        "True True True True False");
  CHECK(render("{{ x.y.z }} {{ x['y']['z'] }} {{ x.y['z'] }} {{ l.0 }} {{ l[-1] }}", ojson::parse("{\"x\": {\"y\": {\"z\": 5}}, \"l\": [7, 8]}")) ==
        "5 5 5 7 8");
  CHECK(render("{{ [1, 'a', none, true, 1.5, {'k': \"v'\"}] }} {{ (1,) }} {{ () }} {{ [\"it's\"] }} {{ ['a\\nb'] }}") ==
        "[1, 'a', None, True, 1.5, {'k': \"v'\"}] (1,) () [\"it's\"] ['a\\nb']");
  CHECK(render("{{ none }} {{ true }} {{ 1.0 }} {{ 10 / 4 }} {{ 3 * 1.0 }} [{{ missing }}]") ==
        "None True 1.0 2.5 3.0 []");
}

TEST_CASE("jinja subscripts and slicing of strings and lists", "[chat_template][slicing]") {
  CHECK(render("{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1, 2, 3, 4][-2:] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3][5:] }} {{ 'abc'[-1] }} {{ 'héllo'[1] }} {{ 'héllo'[:-2] }}") ==
        "el olleh [3, 4] [1, 3] [] c é hél");
  CHECK(render("{{ messages[1:]|length }} {{ messages[-1].content }} {{ messages[::-1][0]['role'] }} {{ [1, 2, 3][:-1] }} {{ 'abcdef'[4:1:-1] }}", ojson::parse("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}")) ==
        "1 u user [1, 2] edc");
}

TEST_CASE("jinja string literal escapes", "[chat_template][escapes]") {
  CHECK(render("{{ 'a\\nb' }}|{{ \"tab\\there\" }}|{{ '\\u00e9\\x41' }}|{{ \"it's\" }}|{{ 'say \\'hi\\'' }}|{{ 'a\\qb' }}|{{ 'a' 'b' }}|{{ '\\\\' }}") ==
        "a\nb|tab\there|éA|it's|say 'hi'|a\\qb|ab|\\");
  CHECK(render("{{ '<|im_start|>' + 'ü' + \"\\\"q\\\"\" }}") ==
        "<|im_start|>ü\"q\"");
}

TEST_CASE("jinja filters", "[chat_template][filters]") {
  CHECK(render("[{{ '  a b \\n'|trim }}] [{{ 'xxaxx'|trim('x') }}] {{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }}") ==
        "[a b] [a] 5 2 1");
  CHECK(render("{{ {'b': 1, 'a': [1, 2.5, none, true], 'c': 'é\"\\n'}|tojson }}") ==
        "{\"b\": 1, \"a\": [1, 2.5, null, true], \"c\": \"é\\\"\\n\"}");
  CHECK(render("{{ {'a': [1, 2], 'b': {}, 'c': []}|tojson(indent=2) }}") ==
        "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": []\n}");
  CHECK(render("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, {'x': 'y'}]|tojson(separators=(',', ':')) }} {{ 'é😀'|tojson }} {{ 1.0|tojson }}") ==
        "{\"a\": 2, \"b\": 1} [1,{\"x\":\"y\"}] \"é😀\" 1.0");
  CHECK(render("{{ 'hello wORLD-x'|title }} {{ 'hELLO'|capitalize }} {{ 'éa'|upper }} {{ 'ÀB'|lower }} {{ 12|string ~ 'x' }}") ==
        "Hello World-X Hello ÉA àb 12x");
  CHECK(render("{{ missing|default('d') }} [{{ ''|default('d') }}] {{ ''|default('d', true) }} {{ none|d('x') }} {{ missing|d }}|") ==
        "d [] d None |");
  CHECK(render("{{ [1, 'a']|join(', ') }} {{ users|join(',', attribute='name') }} {{ [3, 4]|first }}{{ 'abc'|last }} {{ 'ab'|list }}", ojson::parse("{\"users\": [{\"name\": \"x\"}, {\"name\": \"y\"}]}")) ==
        "1, a x,y 3c ['a', 'b']");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %} {{ {'b': 1, 'A': 2}|dictsort }} {{ {'a': 2, 'b': 1}|dictsort(by='value') }}") ==
        "a=1;b=2; [('A', 2), ('b', 1)] [('b', 1), ('a', 2)]");
  CHECK(render("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }} {{ messages|rejectattr('role', 'eq', 'user')|list|length }} {{ messages|selectattr('tool')|list }}", ojson::parse("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}")) ==
        "a|c 1 []");
  CHECK(render("{{ ['a', 'b']|map('upper')|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('in', [2])|list }} {{ [{'n': {'m': 1}}]|map(attribute='n.m')|list }}") ==
        "['A', 'B'] [1, 3] [1, 3] [1]");
  CHECK(render("{{ 'aaa'|replace('a', 'b', 2) }} {{ '42'|int + 1 }} {{ 'x'|int }} {{ '3.7'|int }} {{ 'x'|int(7) }} {{ '2.5'|float * 2 }} {{ 3|float }} {{ -2.5|abs }}") ==
        "bba 43 0 3 7 5.0 3.0 2.5");
  CHECK(render("{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.7|round(0, 'floor') }} {{ 2.1|round(0, 'ceil') }} {{ 3|round }}") ==
        "2.0 4.0 3.14 2.0 3.0 3");
  CHECK(render("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}") ==
        "a\n  b\n\n  c|  a\n  b|a\n> \n> b");
  CHECK(render("{{ ['a', 'A', 'b']|unique|list }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ ['b', 'A', 'c']|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [{'n': 2}, {'n': 1}]|sort(attribute='n')|map(attribute='n')|list }}") ==
        "['a', 'b'] [3, 2, 1] cba ['A', 'b', 'c'] [3, 2, 1] [1, 2]");
  CHECK(render("{{ 'hello big  world'|wordcount }} {{ '<b>'|safe }} {{ '%s-%d'|format('a', 3) }} {{ [3, 1, 2]|max }}{{ [3, 1, 2]|min }}{{ [1, 2, 3]|sum }} {{ '<&>'|e }}") ==
        "3 <b> a-3 316 &lt;&amp;&gt;");
  CHECK(render("{{ 'é😀\\x7f'|tojson(ensure_ascii=true) }} {{ {'k': 'é'}|tojson(ensure_ascii=true) }}") ==
        "\"\\u00e9\\ud83d\\ude00\\u007f\" {\"k\": \"\\u00e9\"}");
  CHECK(render("{{ none|selectattr('type', 'equalto', 'x')|list }} {{ none|map(attribute='x')|list }} {{ ''|reject|list }}") ==
        "[] [] []");
  CHECK(render("{{ '<b>'|safe + '<i>' }} {{ '<i>' + '<b>'|safe }} {{ '<i>' ~ '<b>'|safe }} {{ '<i>'|e }} {{ '<i>'|e|e }} {{ '<i>'|forceescape|forceescape }}") ==
        "<b>&lt;i&gt; &lt;i&gt;<b> <i><b> &lt;i&gt; &lt;i&gt; &amp;lt;i&amp;gt;");
}

TEST_CASE("jinja tests (is ...)", "[chat_template][tests]") {
  CHECK(render("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 0 is none }}{{ x is not none }}", ojson::parse("{\"x\": 1}")) ==
        "TrueTrueTrueFalseTrue");
  CHECK(render("{{ 'a' is string }}{{ 1 is number }}{{ 1.0 is integer }}{{ 1 is integer }}{{ true is integer }}{{ 1.5 is float }}{{ {} is mapping }}{{ [] is mapping }}") ==
        "TrueTrueFalseTrueFalseTrueTrueFalse");
  CHECK(render("{{ [] is iterable }}{{ 'x' is iterable }}{{ 3 is iterable }}{{ 'x' is sequence }}{{ {} is sequence }}{{ true is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}") ==
        "TrueTrueFalseTrueTrueTrueTrueFalseTrueFalse");
  CHECK(render("{{ 3 is divisibleby 3 }}{{ 4 is divisibleby(3) }}{{ 2 is even }}{{ 3 is odd }}{{ 'a' is in ['a'] }}{{ 1 is eq 1 }}{{ 1 is not equalto 2 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is gt 1 }}{{ 'x' is sameas 'x' }}") ==
        "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  CHECK(render("{{ messages[0].content is string }}{{ messages[1].content is string }}{{ messages[1].content is iterable }}{{ messages[0].tool_calls is defined }}{{ raise_exception is callable }}", ojson::parse("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"}]}]}")) ==
        "TrueFalseTrueFalseTrue");
}

TEST_CASE("jinja for loops: loop variables, else, filters, unpacking, break and continue", "[chat_template][loops]") {
  CHECK(render("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }}{{ x }}|{% endfor %}") ==
        "1032103a|2121003b|3210013c|");
  CHECK(render("{% for x in [1, 2, 3] %}{{ loop.previtem is defined }}{{ loop.nextitem|default('-') }}{{ loop.cycle('o', 'e') }} {% endfor %}") ==
        "False2o True3e True-o ");
  CHECK(render("{% for x in [] %}x{% else %}empty{% endfor %} {% for x in range(6) if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %} {% for x in range(6) if x > 2 %}{{ loop.length }}{% endfor %}") ==
        "empty 1,3,5 333");
  CHECK(render("{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %} {% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %} {% for c in 'hé' %}[{{ c }}]{% endfor %} {% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %}") ==
        "37 xy [h][é] x1");
  CHECK(render("{% for i in [1, 2] %}{% set outer = loop %}{% for j in [1, 2] %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}") ==
        "11 12 21 22 ");
  CHECK(render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %} {{ range(2, 8, 3)|list }} {{ range(3, 0, -1)|list }}") ==
        "0134 [2, 5] [3, 2, 1]");
  CHECK(render("{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}", ojson::parse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"A\"}, {\"type\": \"text\", \"text\": \"B\"}]}]}")) ==
        "AB");
}

TEST_CASE("jinja scoping: set inside for vs namespace, if, block set, macros seeing later sets, with", "[chat_template][scoping]") {
  CHECK(render("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}") ==
        "0101010");
  CHECK(render("{% set ns = namespace(n=0, found=false) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }}{{ ns.found }}") ==
        "6True");
  CHECK(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }} {% set messages = messages[1:] %}{{ messages|length }}", ojson::parse("{\"messages\": [1, 2, 3]}")) ==
        "5 2");
  CHECK(render("{% set b %}  hi {{ 1 + 1 }}{% endset %}[{{ b }}] {% set c | trim | upper %}  hi  {% endset %}[{{ c }}] {% set p, q = 1, 2 %}{{ q }}{{ p }}") ==
        "[  hi 2] [HI] 21");
  CHECK(render("{% macro m() %}{{ foo }}{% endmacro %}{% set foo = 1 %}{{ m() }}{% set foo = 2 %}{{ m() }} {% with a = 3 %}{{ a }}{% endwith %}[{{ a }}]") ==
        "12 3[]");
}

TEST_CASE("jinja macros, call blocks, filter blocks, generation tag", "[chat_template][macros]") {
  CHECK(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(punct='.', name='Cy') }}") ==
        "Hi Bob! Hi Al? Hi Cy.");
  CHECK(render("{% macro m(a, b) %}{{ a }}{{ b is defined }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }} {{ m(1, 2, 3, k='v') }}") ==
        "1False(){} 1True(3,){'k': 'v'}");
  CHECK(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %} {% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}") ==
        "[inside] <1><2>");
  CHECK(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }} {% filter upper %}ab{{ 'c' }}{% endfilter %} {% generation %}gen{% endgeneration %}") ==
        "321 ABC gen");
}

TEST_CASE("jinja str, dict and list methods and dict()", "[chat_template][methods]") {
  CHECK(render("{{ '  a '.strip() }}|{{ 'xxa'.lstrip('x') }}|{{ 'axx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a<b>c'.split('<b>')[1] }}|{{ 'a b c'.rsplit(' ', 1) }}") ==
        "a|a|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|c|['a b', 'c']");
  CHECK(render("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}{{ 'hello world'.title() }}{{ 'ABC'.lower() }}{{ 'abc'.upper() }}{{ 'a-b'.replace('-', '+') }}{{ 'hi'.capitalize() }}") ==
        "TrueTrueHello WorldabcABCa+bHi");
  CHECK(render("{{ '{}-{}'.format('a', 1) }} {{ 'x{0}{name}{{}}'.format(1, name='n') }} {{ ', '.join(['a', 'b']) }} {{ 'abcb'.find('b') }} {{ 'abcb'.rfind('b') }} {{ 'abcb'.count('b') }} {{ '12'.isdigit() }}") ==
        "a-1 x1n{} a, b 1 3 2 True");
  CHECK(render("{{ d.get('a') }}{{ d.get('z', 'dflt') }}{{ d.get('z') }}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}{{ d.keys()|list }}{{ d.values()|list }}{{ d.a }}{{ d['b'] }}", ojson::parse("{\"d\": {\"a\": 1, \"b\": 2}}")) ==
        "1dfltNonea1b2['a', 'b'][1, 2]12");
  CHECK(render("{{ dict(a=1, b='x') }} {{ dict(a=1).a }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }}") ==
        "{'a': 1, 'b': 'x'} 1 2 1");
  CHECK(render("{% set d = {0: 'a', 512: 'b', 'k': 'c'} %}{{ d[512] }}{{ d[0] }}{{ d['k'] }} {{ d }} {{ d|tojson }} {{ {2: 'x', 1: 'y'}|dictsort }} {{ 512 in d }}{{ 1 in d }}") ==
        "bac {0: 'a', 512: 'b', 'k': 'c'} {\"0\": \"a\", \"512\": \"b\", \"k\": \"c\"} [(1, 'y'), (2, 'x')] TrueFalse");
}

TEST_CASE("jinja undefined values behave like jinja2's default Undefined", "[chat_template][undefined]") {
  CHECK(render("[{{ missing }}]{{ missing|length }}{{ missing is defined }}{% for x in missing %}x{% endfor %}{{ 'a' ~ missing }}{{ missing == missing2 }}{{ missing|upper }}{{ missing|list }}[{{ d.nokey }}][{{ [1][5] }}][{{ none.x }}]{{ not missing }}", ojson::parse("{\"d\": {}}")) ==
        "[]0FalseaTrue[][][][]True");
  CHECK(render("{% if messages[0]['role'] == 'system' %}sys{% else %}none{% endif %}{% if tools %}T{% endif %}{% if tools is not none %}N{% endif %}", ojson::parse("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": null}")) ==
        "none");
}

TEST_CASE("jinja strftime_now formats the pinned instant", "[chat_template][globals]") {
  CHECK(render("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%A %B') }}") ==
        "07 Mar 2025 2025-03-07 14:05:09 Friday March");
}

TEST_CASE("jinja errors carry kind, message and template line", "[chat_template][errors]") {
  {
    const ChatTemplateError e = render_error("line1\n{% if true %}\n{{ raise_exception('Bad role: ' ~ 'x') }}\n{% endif %}");
    CHECK(e.kind() == ChatTemplateError::Kind::Raised);
    CHECK_THAT(e.message(), Catch::Contains("Bad role: x"));
    CHECK(e.line() == 3);
  }
  {
    const ChatTemplateError e = render_error("a\nb\n{{ 1 + 'x' }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("unsupported operand type(s) for +: 'int' and 'str'"));
    CHECK(e.line() == 3);
  }
  {
    const ChatTemplateError e = render_error("{{ 'a' + 1 }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("can only concatenate str (not \"int\") to str"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ [1] + 'x' }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("can only concatenate list (not \"str\") to list"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("\n\n{{ missing.attr }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("'missing' is undefined"));
    CHECK(e.line() == 3);
  }
  {
    const ChatTemplateError e = render_error("{{ d.nokey.x }}", ojson::parse("{\"d\": {}}"));
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("'dict object' has no attribute 'nokey'"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ messages[0].content }}", ojson::parse("{\"messages\": []}"));
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("list object has no element 0"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ missing + 1 }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("'missing' is undefined"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{% for m in none %}{% endfor %}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("'NoneType' object is not iterable"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ missing|tojson }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("Object of type Undefined is not JSON serializable"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{% set l = [] %}{{ l.append(1) }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("access to attribute 'append' of 'list' object is unsafe."));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{% set x = 1 %}{% set x.y = 2 %}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("cannot assign attribute on non-namespace object"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ 1 / 0 }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Render);
    CHECK_THAT(e.message(), Catch::Contains("division by zero"));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("ok\n{% if x %}\nno end");
    CHECK(e.kind() == ChatTemplateError::Kind::Syntax);
    CHECK_THAT(e.message(), Catch::Contains("Unexpected end of template"));
    CHECK(e.line() == 3);
  }
  {
    const ChatTemplateError e = render_error("{{ 1 + }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Syntax);
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("\n{% foo %}");
    CHECK(e.kind() == ChatTemplateError::Kind::Syntax);
    CHECK_THAT(e.message(), Catch::Contains("Encountered unknown tag 'foo'."));
    CHECK(e.line() == 2);
  }
  {
    const ChatTemplateError e = render_error("{{ 'abc }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Syntax);
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ (1 }}");
    CHECK(e.kind() == ChatTemplateError::Kind::Syntax);
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{% for x in y %}{% endif %}");
    CHECK(e.kind() == ChatTemplateError::Kind::Syntax);
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ x|nosuchfilter }}");
    CHECK_THAT(e.message(), Catch::Contains("No filter named 'nosuchfilter'."));
    CHECK(e.line() == 1);
  }
  {
    const ChatTemplateError e = render_error("{{ 1 is nosuchtest }}");
    CHECK_THAT(e.message(), Catch::Contains("No test named 'nosuchtest'."));
    CHECK(e.line() == 1);
  }
}

TEST_CASE("ChatTemplate API: what(), context types, reuse", "[chat_template][api]") {
  const ChatTemplateError e = render_error("a\n{{ raise_exception('no system role') }}");
  CHECK(std::string(e.what()) == "chat template line 2: no system role");
  CHECK(e.kind() == ChatTemplateError::Kind::Raised);
  // A ChatTemplateError is an invalid_argument, which the HTTP edge answers with 400.
  CHECK_THROWS_AS(render("{{ raise_exception('x') }}"), std::invalid_argument);

  // ordered_json keeps key order into tojson; nlohmann::json sorts its keys.
  const ChatTemplate t = ChatTemplate::parse("{{ d|tojson }}");
  CHECK(t.render(ojson::parse(R"({"d": {"z": 1, "a": 2}})")) == R"({"z": 1, "a": 2})");
  CHECK(t.render(nlohmann::json::parse(R"({"d": {"z": 1, "a": 2}})")) == R"({"a": 2, "z": 1})");
  CHECK_THROWS_AS(t.render(ojson::array()), std::invalid_argument);

  // One parsed template renders many contexts; copies share the parse.
  const ChatTemplate copy = t;
  CHECK(copy.render(ojson{{"d", 1}}) == "1");
  CHECK(t.render(ojson{{"d", "x"}}) == "\"x\"");
  CHECK(copy.source() == "{{ d|tojson }}");
  CHECK(ChatTemplate().render(ojson::object()).empty());
  CHECK(ChatTemplate().source().empty());

  // Without a pinned time strftime_now formats the current time (a 4-digit year here).
  const std::string year = ChatTemplate::parse("{{ strftime_now('%Y') }}").render(ojson::object());
  CHECK(year.size() == 4);
  CHECK(year >= "2024");
}

TEST_CASE("ChatTemplate::variable_names: every name the template reads", "[chat_template][api]") {
  using Names = std::set<std::string>;
  const ChatTemplate t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages if m.role != skip_role %}"
      "{{ m['content'] | replace(old, new) }}{% set ns.n = ns.n + 1 %}{% endfor %}"
      "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
      "{% macro f(a, b=default_b) %}{{ a ~ b }}{% endmacro %}{{ f(x, b=y) }}"
      "{{ tools | tojson if tools else none_text }}{% set local = 1 %}{{ local }}");
  // Loads only: the set/for/macro targets (local, m, a, b, f) count where they are read.
  CHECK(t.variable_names() == Names{"a", "b", "default_b", "enable_thinking", "f", "local", "m",
                                    "messages", "namespace", "new", "none_text", "ns", "old",
                                    "skip_role", "tools", "x", "y"});
  CHECK(ChatTemplate::parse("plain text").variable_names().empty());
  CHECK(ChatTemplate().variable_names().empty());
}

TEST_CASE("prepare_chat_messages matches transformers' message preprocessing", "[chat_template][prepare]") {
  const ojson golden = load_golden();
  REQUIRE(golden["prepare_messages"].size() >= 5);
  for (const auto& c : golden["prepare_messages"]) {
    INFO(c["input"].dump());
    const ojson got = octet::prepare_chat_messages(c["input"]);
    CHECK(got.dump() == c["expected"].dump());  // dump() compares key order too
  }
  CHECK_THROWS_AS(octet::prepare_chat_messages(ojson::object()), std::invalid_argument);
  CHECK_THROWS_AS(octet::prepare_chat_messages(ojson::array({1})), std::invalid_argument);
}

TEST_CASE("chat template with a typical HF shape renders the SmolLM2 prompt", "[chat_template][smollm2]") {
  // SmolLM2-135M-Instruct's template (GGUF tokenizer.chat_template), expected text by hand.
  const ojson golden = load_golden();
  std::string source;
  for (const auto& t : golden["templates"])
    if (t["name"] == "smollm2") source = t["source"];
  REQUIRE(!source.empty());
  const ojson ctx = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}};
  CHECK(ChatTemplate::parse(source).render(ctx) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}
