// Budgets of the chat-template interpreter (server/jinja/jinja_budget.h): template bombs and request
// data that would hang, overflow the stack or exhaust memory must fail fast with
// ChatTemplateError kind Limit, while real templates (tests/server/golden) still render and pass
// check_chat_template (server/openai/chat_render.h).
#include <catch2/catch.hpp>

#include <pthread.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai/chat_render.h"
#include "server/jinja/chat_template.h"
#include "server/jinja/jinja_budget.h"

using octet::ChatTemplate;
using octet::ChatTemplateError;
using ojson = nlohmann::ordered_json;

namespace {

// Under AddressSanitizer frames are several times larger and code runs ~3-10x slower: the stack
// and time bounds below scale by this factor (they stay exact in the Release tree).
#if defined(__SANITIZE_ADDRESS__)
constexpr int kSanitizerFactor = 8;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kSanitizerFactor = 8;
#else
constexpr int kSanitizerFactor = 1;
#endif
#else
constexpr int kSanitizerFactor = 1;
#endif

ojson load_golden() {
  std::ifstream in(std::string(OCTET_SOURCE_DIR) + "/tests/server/golden/chat_templates.json");
  REQUIRE(in.good());
  return ojson::parse(in);
}

std::string golden_source(const std::string& name) {
  const ojson golden = load_golden();
  for (const auto& t : golden["templates"])
    if (t["name"] == name) return t["source"];
  FAIL("no golden template " << name);
  return "";
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Parses and renders; returns the error, which must be a Limit error naming `needle`, and must
// come within `max_seconds`.
ChatTemplateError limit_error(const std::string& source, const std::string& needle, const ojson& ctx = ojson::object(),
                              double max_seconds = 20) {
  const auto start = std::chrono::steady_clock::now();
  try {
    ChatTemplate::parse(source).render(ctx);
  } catch (const ChatTemplateError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO("error: " << e.what() << " after " << s << " s");
    CHECK(e.kind() == ChatTemplateError::Kind::Limit);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    CHECK(s < max_seconds * kSanitizerFactor);
    return e;
  }
  FAIL("expected a Limit error for: " << source.substr(0, 200));
  return ChatTemplateError(ChatTemplateError::Kind::Render, "", 0);
}

// Runs fn on a thread with a stack of `stack_bytes` (a worker thread smaller than the 8 MiB
// default): a recursion that does not fit crashes the test.
void on_small_stack(std::size_t stack_bytes, std::function<void()> fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  REQUIRE(pthread_attr_setstacksize(&attr, stack_bytes) == 0);
  pthread_t thread;
  auto run = [](void* p) -> void* {
    (*static_cast<std::function<void()>*>(p))();
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, run, &fn) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

}  // namespace

TEST_CASE("arithmetic bombs and overflow fail with a limit error", "[jinja_budget]") {
  limit_error("{{ 2 ** 99999999999999 }}", "64-bit integers");
  limit_error("{{ 9223372036854775807 + 1 }}", "9223372036854775807 + 1");
  limit_error("{{ -9223372036854775807 - 2 }}", "64-bit integers");
  limit_error("{{ 4611686018427387904 * 2 }}", "4611686018427387904 * 2");
  limit_error("{{ -(-9223372036854775807 - 1) }}", "64-bit integers");
  limit_error("{{ (-9223372036854775807 - 1) // -1 }}", "64-bit integers");
  limit_error("{{ (-9223372036854775807 - 1) | abs }}", "64-bit integers");
  limit_error("{{ [9223372036854775807, 1] | sum }}", "64-bit integers");
  limit_error("{{ 1e300 | int }}", "64-bit integers");
  limit_error("{{ 10.0 ** 400 }}", "finite doubles");
  limit_error("{{ 1e308 * 10 }}", "finite doubles");
  // In range, Python's results.
  CHECK(ChatTemplate::parse("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 7 // -1 }} {{ (-9223372036854775807 - 1) % -1 }}")
            .render(ojson::object()) == "4611686018427387904 -9223372036854775808 -7 0");
}

TEST_CASE("number literals beyond int64 or double are syntax errors, not std exceptions", "[jinja_budget]") {
  // Found by the jinja fuzzer (tests/fuzz/findings/jinja/int_literal_overflow): std::stoll's
  // out_of_range escaped as a non-template error.
  for (const char* src : {"{{ 99999999999999999999 }}", "{{ 0xffffffffffffffffff }}", "{{ 1e999 }}"}) {
    INFO(src);
    try {
      ChatTemplate::parse(src).render(ojson::object());
      FAIL("expected a syntax error");
    } catch (const ChatTemplateError& e) {
      CHECK(e.kind() == ChatTemplateError::Kind::Syntax);
    }
  }
  CHECK(ChatTemplate::parse("{{ 9223372036854775807 }} {{ 0x10 }} {{ 1e3 }}").render(ojson::object()) ==
        "9223372036854775807 16 1000.0");
}

TEST_CASE("string and list growth stop at the value size limit", "[jinja_budget]") {
  limit_error(R"({{ "ab" * 4611686018427387904 }})", "bytes per value");
  limit_error("{{ [1, 2] * 4611686018427387904 }}", "bytes per value");
  limit_error(R"({{ "ab" * 40000000 }})", "bytes per value");
  // Doubling a string in a loop through a namespace.
  limit_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
              "{{ ns.s | length }}",
              "bytes per value");
  limit_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
              "bytes per value");
  limit_error("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
              "bytes per value");
  limit_error(R"({{ ("x" * 1000000) | replace("", "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy") }})",
              "bytes per value");
  limit_error(R"({{ "a\nb" | indent(1000000000000) }})", "bytes per value");
  limit_error(R"({{ ("x" * 30000000) | list | length }})", "bytes per value");
}

TEST_CASE("loops stop at the step budget and the output budget", "[jinja_budget]") {
  limit_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps");
  limit_error("{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}", "steps");
  limit_error("{{ range(1000000000) | length }}", "100000 items");
  // Large string repeats count their bytes: 1,000 x 1 MB is 62.5M steps (it copied 1 GB
  // within a budget of 50M steps before).
  limit_error("{% for i in range(1000) %}{% set x = 'a' * 1000000 %}{% endfor %}", "steps");
  const ojson ctx = {{"big", std::string(1000, 'x')}};
  limit_error("{% for i in range(100000) %}{{ big }}{% endfor %}", "the rendered text", ctx);
}

TEST_CASE("deep nesting in the template source fails at parse without a stack overflow", "[jinja_budget]") {
  const int n = 100000;
  limit_error("{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}", "nesting");
  limit_error("{{ " + repeat("[", n) + repeat("]", n) + " }}", "nesting");
  limit_error("{{ " + repeat("{'a': ", n) + "1" + repeat("}", n) + " }}", "nesting");
  limit_error("{{ " + repeat("not ", n) + "x }}", "nesting");
  limit_error("{{ " + repeat("-", n) + "1 }}", "nesting");
  limit_error("{{ x" + repeat(".a", n) + " }}", "nesting");
  limit_error("{{ x" + repeat("[0]", n) + " }}", "nesting");
  limit_error("{{ x" + repeat("()", n) + " }}", "nesting");
  limit_error("{{ x" + repeat(" | e", n) + " }}", "nesting");
  limit_error("{{ 1" + repeat(" + 1", n) + " }}", "nesting");
  limit_error("{{ 1" + repeat(" ~ 1", n) + " }}", "nesting");
  limit_error("{{ 1" + repeat(" and 1", n) + " }}", "nesting");
  limit_error("{{ 1" + repeat(" if 1", n) + " }}", "nesting");
  limit_error("{{ f(" + repeat("f(", n) + repeat(")", n) + ") }}", "nesting");
  limit_error(repeat("{% if true %}", 10000) + "x" + repeat("{% endif %}", 10000), "nesting");
  limit_error(repeat("{% for i in [1] %}", 10000) + "x" + repeat("{% endfor %}", 10000), "nesting");
  limit_error(repeat("{% if true %}", 10000), "nesting");  // unterminated too
  // Parenthesised chains: the subtree depth counts, not only the parser's recursion.
  limit_error("{{ " + repeat("(", 100) + "x" + repeat(".a" + std::string(")"), 100) + repeat(".a", 200) + " }}",
              "nesting");
}

TEST_CASE("recursion while rendering stops at the macro depth and render depth", "[jinja_budget]") {
  limit_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro call depth");
  limit_error("{% macro f() %}{{ f() ~ f() }}{% endmacro %}{{ f() }}", "macro call depth");
  // Mutual recursion through caller().
  limit_error("{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}", "macro call depth");
  // A macro recursing through deeply nested (accepted) expressions reaches the render depth.
  limit_error("{% macro f(n) %}{{ " + repeat("[", 120) + "f(n + 1)" + repeat("]", 120) + " }}{% endmacro %}{{ f(0) }}",
              "nested evaluation");
}

TEST_CASE("values built while rendering cannot nest without bound or form cycles", "[jinja_budget]") {
  limit_error("{% set x = [] %}" + repeat("{% set x = [x] %}", 1000) + "{{ x }}", "levels");
  limit_error("{% set x = {} %}" + repeat("{% set x = {'a': x} %}", 1000) + "{{ x | tojson }}", "levels");
  limit_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}",
              "levels");
  for (const std::string src : {"{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}",
                                "{% set ns = namespace() %}{% set ns.l = [ns] %}",
                                "{% set ns = namespace() %}{% for i in [1] %}{% set ns.l = loop %}{% endfor %}",
                                "{% set ns = namespace() %}{% set ns.f = ns.x | default(range) %}",
                                "{% set a = namespace() %}{% set b = namespace(a=a) %}"}) {
    INFO(src);
    CHECK_THROWS_WITH(ChatTemplate::parse(src).render(ojson::object()),
                      Catch::Contains("a namespace cannot hold a namespace, function or loop object"));
  }
}

TEST_CASE("request data nested deeper than the JSON depth limit fails clearly", "[jinja_budget]") {
  const ChatTemplate t = ChatTemplate::parse("{{ messages | length }}");
  for (int depth : {300, 100000}) {
    INFO("depth " << depth);
    ojson inner = ojson::array();
    nlohmann::json inner_sorted = nlohmann::json::array();
    for (int i = 0; i < depth; ++i) {
      ojson outer = ojson::array();
      outer.push_back(std::move(inner));
      inner = std::move(outer);
      nlohmann::json outer_sorted = nlohmann::json::array();
      outer_sorted.push_back(std::move(inner_sorted));
      inner_sorted = std::move(outer_sorted);
    }
    // Moved in, not copied: nlohmann's copy constructor itself recurses.
    ojson ctx = ojson::object();
    ctx["messages"] = std::move(inner);
    nlohmann::json ctx_sorted = nlohmann::json::object();
    ctx_sorted["messages"] = std::move(inner_sorted);
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0) t.render(ctx);
        else t.render(ctx_sorted);
        FAIL("rendered a context nested " << depth << " deep");
      } catch (const ChatTemplateError& e) {
        CHECK(e.kind() == ChatTemplateError::Kind::Limit);
        CHECK(std::string(e.what()).find("256 levels") != std::string::npos);
      }
    }
  }
  // Within the limit it renders (the outer object is level 1, `messages` level 2).
  ojson ok = ojson::array();
  for (int i = 0; i < 250; ++i) ok = ojson::array({ok});
  CHECK(t.render(ojson{{"messages", ok}}) == "1");
}

TEST_CASE("the deepest accepted template parses and renders on a 1 MiB stack", "[jinja_budget]") {
  // Largest nesting each form accepts (found by the parse succeeding one level below the limit).
  auto deepest = [](const std::function<std::string(int)>& make) {
    int lo = 1, hi = octet::jinja::kMaxParseDepth + 1;  // make(lo) parses, make(hi) does not
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      try {
        ChatTemplate::parse(make(mid));
        lo = mid;
      } catch (const ChatTemplateError&) {
        hi = mid;
      }
    }
    return make(lo);
  };
  const std::vector<std::string> sources = {
      deepest([](int n) { return "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}"; }),
      deepest([](int n) { return "{{ " + repeat("[", n) + repeat("]", n) + " | length }}"; }),
      deepest([](int n) { return "{{ " + repeat("not ", n) + "x }}"; }),
      deepest([](int n) { return "{{ " + repeat("-", n) + "1 }}"; }),
      deepest([](int n) { return "{{ 1" + repeat(" + 1", n) + " }}"; }),
      deepest([](int n) { return "{{ x" + repeat(" | default(1)", n) + " }}"; }),
      deepest([](int n) { return repeat("{% if true %}", n) + "x" + repeat("{% endif %}", n); }),
      deepest([](int n) { return repeat("{% for i in [1] %}", n) + "x" + repeat("{% endfor %}", n); }),
      // Macro recursion to its limit, each call inside nested blocks and expressions.
      "{% macro f(n) %}{% if n < 127 %}{% for i in [1] %}{% if true %}{{ ((((f(n + 1))))) }}{% endif %}"
      "{% endfor %}{% endif %}{% endmacro %}{{ f(0) | length }}",
  };
  int rendered = 0;
  on_small_stack(std::size_t{1} << 20 << (kSanitizerFactor > 1 ? 3 : 0), [&] {  // 1 MiB (8 under ASan)
    for (const auto& s : sources) {
      try {
        ChatTemplate::parse(s).render(ojson::object());
        ++rendered;
      } catch (const ChatTemplateError& e) {
        // Reaching a render limit is fine; a crash is not.
        if (e.kind() == ChatTemplateError::Kind::Limit) ++rendered;
      }
    }
  });
  CHECK(rendered == static_cast<int>(sources.size()));
}

TEST_CASE("a 15 MB message renders through the SmolLM2 template", "[jinja_budget]") {
  const std::string content(15'000'000, 'a');
  const ChatTemplate t = ChatTemplate::parse(golden_source("smollm2"));
  const std::string out = t.render(
      ojson{{"messages", {{{"role", "user"}, {"content", content}}}}, {"add_generation_prompt", true}});
  CHECK(out ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n");
  // A long conversation stays well inside the step budget.
  ojson messages = ojson::array();
  for (int i = 0; i < 20000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "message " + std::to_string(i)}});
  CHECK(t.render(ojson{{"messages", messages}}).size() > 20000 * 30);
}

TEST_CASE("check_chat_template passes real templates and rejects bombs", "[jinja_budget][check]") {
  const ojson golden = load_golden();
  for (const auto& t : golden["templates"]) {
    INFO("template " << t["name"].get<std::string>());
    CHECK_NOTHROW(octet::server::check_chat_template(t["source"], t["bos_token"], t["eos_token"]));
  }
  // Refusing the system role with its own raise_exception is allowed: retried without it.
  const std::string no_system =
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
  CHECK_NOTHROW(octet::server::check_chat_template(no_system, "<s>", "</s>"));

  auto rejected = [](const std::string& source, const std::string& needle) {
    INFO(source.substr(0, 120));
    try {
      octet::server::check_chat_template(source, "<s>", "</s>");
      FAIL("check_chat_template accepted it");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  rejected("{{ 2 ** 99999999999999 }}", "exceeds a budget");
  rejected("{% for m in messages %}{{ 2 ** 99999999999999 }}{% endfor %}", "64-bit integers");
  rejected(R"({{ "ab" * 4611686018427387904 }})", "bytes per value");
  rejected("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps");
  rejected("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro call depth");
  rejected("{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}", "does not parse");
  rejected("{% if %}", "does not parse");
  rejected("{{ raise_exception('always') }}", "always");
  rejected("{{ messages[0].nope.deeper }}", "fails on a sample");
}
