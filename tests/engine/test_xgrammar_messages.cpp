// xgrammar's text as clients and operators see it (engine/xgrammar_log.h): a bad spec's error
// keeps xgrammar's human message without its time, source path or checked condition; long
// messages are cut; xgrammar's warnings go to spdlog, not stderr. The message shapes are
// xgrammar 0.2.8's own: LogFatalError built by the real class, and errors of real compiles.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "engine/request_error.h"
#include "engine/structured_output.h"
#include "engine/xgrammar_log.h"
#include "structured_test_support.h"
#include "support/logging.h"  // xgrammar's LogFatalError

namespace octet {
namespace {

using testing::so_params;

bool has_source_text(const std::string& s) {
  for (const char* needle : {".cc:", ".h:", "Check failed", "is false", "_deps/", "cpp/"})
    if (s.find(needle) != std::string::npos) return true;
  // "[HH:MM:SS] "
  for (size_t i = 0; i + 11 <= s.size(); ++i)
    if (s[i] == '[' && s[i + 3] == ':' && s[i + 6] == ':' && s[i + 9] == ']') return true;
  return false;
}

}  // namespace

TEST_CASE("xgrammar_error_message keeps the human message of xgrammar's shapes",
          "[structured][xgrammar_messages]") {
  // Verbatim what() texts of xgrammar 0.2.8 errors (bad JSON schema text, bad EBNF).
  CHECK(xgrammar_error_message(
            "[21:33:27] _deps/xgrammar-0.2.8/cpp/json_schema_converter.cc:4939: Check failed: "
            "(error.empty()) is false: Failed to parse JSON: syntax error at line 1 near: . The "
            "JSON string is:{\"type\": \n") ==
        "Failed to parse JSON: syntax error at line 1 near: . The JSON string is:{\"type\":");
  CHECK(xgrammar_error_message(
            "[09:05:01] /work/main/build/_deps/xgrammar-0.2.8/cpp/grammar_parser.cc:820: EBNF "
            "parser error at line 1, column 10: Rule \"undefined_rule\" is not defined\n") ==
        "EBNF parser error at line 1, column 10: Rule \"undefined_rule\" is not defined");
  // An internal check, and a message wrapped inside another.
  CHECK(xgrammar_error_message("compile failed: [23:59:59] /src/cpp/fsm.cc:7: Internal check "
                               "failed: (a.size() == (b)) is false: state 3 has no edge") ==
        "compile failed: state 3 has no edge");
  // Text of another shape is left as it is.
  const std::string tag =
      "Invalid structural tag error: Structural tag's type must be a string \"structural_tag\"";
  CHECK(xgrammar_error_message(tag) == tag);
  CHECK(xgrammar_error_message("[1] a:2: b") == "[1] a:2: b");
  CHECK(xgrammar_error_message("[12:34:56] no line number here") ==
        "[12:34:56] no line number here");
  CHECK(xgrammar_error_message("  \n") == "");
  // Long messages (xgrammar echoes the spec) are cut at a character boundary.
  std::string long_text;
  for (int i = 0; i < 1000; ++i) long_text += "\xc3\xa9";  // U+00E9, 2 bytes
  const std::string cut = xgrammar_error_message(long_text);
  CHECK(cut.size() == 1024 + 4);
  CHECK(cut.substr(cut.size() - 4) == " ...");
  CHECK(cut.substr(0, 1024) == long_text.substr(0, 1024));
  const std::string odd = "x" + long_text;  // the byte limit falls inside a character
  CHECK(xgrammar_error_message(odd).substr(0, 1023) == odd.substr(0, 1023));
  CHECK(xgrammar_error_message(odd).size() == 1023 + 4);
}

TEST_CASE("xgrammar_error_message on xgrammar's own LogFatalError", "[structured][xgrammar_messages]") {
  const xgrammar::LogFatalError e("/opt/src/xgrammar/cpp/regex_converter.cc", 83,
                                  "Regex parsing error at position 6: Unclosed '['");
  REQUIRE(std::string(e.what()).find("regex_converter.cc:83") != std::string::npos);
  CHECK(xgrammar_error_message(e.what()) == "Regex parsing error at position 6: Unclosed '['");
}

TEST_CASE("a bad spec's error names the field and carries no xgrammar source text",
          "[structured][xgrammar_messages]") {
  struct Case {
    StructuredOutputParams p;
    std::string human;  // xgrammar's message, as it should reach the client
  };
  const std::vector<Case> cases = {
      {so_params(StructuredOutputKind::Json, "{\"type\": ", "response_format"),
       "Failed to parse JSON: syntax error"},
      {so_params(StructuredOutputKind::Json, R"({"type": "no-such-type"})", "json_schema"),
       "Unsupported type \"no-such-type\""},
      {so_params(StructuredOutputKind::Json, R"({"type":"integer","minimum":5,"maximum":1})",
                 "json_schema"),
       "Invalid range: minimum greater than maximum"},
      {so_params(StructuredOutputKind::Regex, "([a-z", "regex"),
       "Regex parsing error at position 6: Unclosed '['"},
      {so_params(StructuredOutputKind::Regex, "a(?=b)", "regex"), "Lookahead is not supported"},
      {so_params(StructuredOutputKind::Grammar, "root ::= undefined_rule", "grammar"),
       "Rule \"undefined_rule\" is not defined"},
      {so_params(StructuredOutputKind::Grammar, "root ::= \"a", "grammar"),
       "Expect \" in string literal"},
  };
  for (const Case& c : cases) {
    INFO(c.p.spec);
    try {
      validate_structured_output(c.p);
      FAIL("no error");
    } catch (const RequestError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(e.param() == c.p.field);
      CHECK(msg.find(c.p.field) != std::string::npos);
      CHECK(msg.find(c.human) != std::string::npos);
      CHECK_FALSE(has_source_text(msg));
      CHECK(msg.back() != '\n');
    }
  }
}

TEST_CASE("xgrammar's warnings go to spdlog, not stderr", "[structured][xgrammar_messages]") {
  // Capture the default logger and the process's stderr around a regex xgrammar warns about.
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  auto capture = std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  capture->set_level(spdlog::level::debug);
  spdlog::set_default_logger(capture);
  const std::string err_path = "/tmp/octet_xgrammar_stderr_" + std::to_string(getpid());
  std::fflush(stderr);
  const int saved = dup(2);
  REQUIRE(saved >= 0);
  std::FILE* f = std::fopen(err_path.c_str(), "w");
  REQUIRE(f);
  dup2(fileno(f), 2);
  // "\Q" is not a regex escape xgrammar knows: it warns and matches the character.
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Regex, "\\Qa", "regex")));
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(f);
  spdlog::set_default_logger(previous);
  std::ifstream in(err_path);
  const std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());
  CHECK(err.empty());
  const std::string logged = log.str();
  INFO(logged);
  CHECK(logged.find("[warning] xgrammar: ") != std::string::npos);
  CHECK(logged.find("Escape sequence '\\Q' is not recognized") != std::string::npos);
  CHECK(logged.find("regex_converter.cc") == std::string::npos);
}

}  // namespace octet
