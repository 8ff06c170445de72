// Operational logging (server/http/request_log.h): which client request ids are honoured, the text
// and JSON line formats (expected lines written out by hand), escaping of injected bytes, and
// the per-thread request id scope.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/details/log_msg.h>

#include "server/http/request_log.h"
#include "server/openai/api_error.h"

using namespace octet::server;

namespace {

/// 2026-12-01T16:52:31.123Z (1796143951123 ms after the epoch, by Python's datetime).
std::chrono::system_clock::time_point fixed_time() {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(1796143951123LL));
}

std::string format(const std::string& fmt, const std::string& text,
                   spdlog::level::level_enum level = spdlog::level::info) {
  const spdlog::details::log_msg msg(fixed_time(), spdlog::source_loc{}, "", level,
                                     spdlog::string_view_t(text.data(), text.size()));
  spdlog::memory_buf_t buf;
  make_log_formatter(fmt)->format(msg, buf);
  return std::string(buf.data(), buf.size());
}

}  // namespace

TEST_CASE("valid_request_id: 1..128 bytes of the id alphabet") {
  CHECK(valid_request_id("a"));
  CHECK(valid_request_id("my-id.1"));
  CHECK(valid_request_id("0f8e7d6c-5b4a-3210-fedc-ba9876543210"));
  CHECK(valid_request_id("A_b:c~d+e/f=g"));
  CHECK(valid_request_id(std::string(128, 'x')));
  CHECK_FALSE(valid_request_id(""));
  CHECK_FALSE(valid_request_id(std::string(129, 'x')));
  for (const char* bad : {"a b", "a\nb", "a\rb", "a\tb", "a\"b", "a\\b", "a{b", "a[b]", "a%0Ab",
                          "a;b", "a,b", "\xc3\xbc", "a\x7f"}) {
    CAPTURE(bad);
    CHECK_FALSE(valid_request_id(bad));
  }
  CHECK_FALSE(valid_request_id(std::string("a\0b", 3)));
}

TEST_CASE("request_id_for keeps a valid client id and replaces any other by a fresh one") {
  CHECK(request_id_for("client-7") == "client-7");
  for (const std::string& bad : {std::string(), std::string("x\n[error] forged"),
                                 std::string(200, 'a')}) {
    const std::string id = request_id_for(bad);
    CHECK(id.size() == 32);
    CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  }
  CHECK(new_request_id() != new_request_id());
}

TEST_CASE("access_log_message: method, path, status, tokens, TTFT and latency") {
  AccessLogEntry e{"POST", "/v1/completions", 200, 12, 5, 31.25, 80.04};
  CHECK(access_log_message(e) ==
        "POST /v1/completions 200 prompt_tokens=12 completion_tokens=5 ttft_ms=31.2 "
        "latency_ms=80.0");
  AccessLogEntry health{"GET", "/health", 503, 0, 0, -1, 0.26};
  CHECK(access_log_message(health) ==
        "GET /health 503 prompt_tokens=0 completion_tokens=0 ttft_ms=- latency_ms=0.3");
}

TEST_CASE("text format: UTC time, level, request id inside a scope, escaped control bytes") {
  CHECK(format("text", "octet serve: ready") ==
        "[2026-12-01 16:52:31.123] [info] octet serve: ready\n");
  CHECK(format("text", "x", spdlog::level::warn) == "[2026-12-01 16:52:31.123] [warning] x\n");
  const std::string id = "req-1";
  RequestLogScope scope(id);
  CHECK(format("text", "hello") == "[2026-12-01 16:52:31.123] [info] [req-1] hello\n");
  // A message carrying a client's bytes cannot start a second line.
  CHECK(format("text", "GET /a\n[2026-12-01 00:00:00.000] [error] forged\r\x01") ==
        "[2026-12-01 16:52:31.123] [info] [req-1] GET /a\\n[2026-12-01 00:00:00.000] [error] "
        "forged\\r\\x01\n");
}

TEST_CASE("JSON format: one object per line with time, level, request_id, message") {
  CHECK(format("json", "octet serve: ready") ==
        "{\"time\":\"2026-12-01T16:52:31.123Z\",\"level\":\"info\",\"message\":\"octet serve: "
        "ready\"}\n");
  const std::string id = "req-2";
  RequestLogScope scope(id);
  const std::string line = format("json", "a \"quoted\"\nline\xff", spdlog::level::err);
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);
  const auto j = nlohmann::json::parse(line);
  CHECK(j.size() == 4);
  CHECK(j["time"] == "2026-12-01T16:52:31.123Z");
  CHECK(j["level"] == "error");
  CHECK(j["request_id"] == "req-2");
  CHECK(j["message"] == "a \"quoted\"\nline\xef\xbf\xbd");  // invalid UTF-8 -> U+FFFD
}

TEST_CASE("scopes nest and are per thread") {
  CHECK(current_request_id().empty());
  const std::string outer = "outer", inner = "inner";
  {
    RequestLogScope a(outer);
    CHECK(current_request_id() == "outer");
    {
      RequestLogScope b(inner);
      CHECK(current_request_id() == "inner");
      std::string seen = "unset";
      std::thread([&] { seen = current_request_id(); }).join();
      CHECK(seen.empty());
    }
    CHECK(current_request_id() == "outer");
  }
  CHECK(current_request_id().empty());
}

TEST_CASE("make_log_formatter and configure_logging refuse unknown names") {
  CHECK_THROWS_AS(make_log_formatter("xml"), std::invalid_argument);
  CHECK_THROWS_AS(configure_logging("text", "loud"), std::invalid_argument);
  CHECK_THROWS_AS(configure_logging("yaml", "info"), std::invalid_argument);
}

TEST_CASE("unknown field names are cut for the log line", "[server][log]") {
  using octet::server::field_names_for_log;
  CHECK(field_names_for_log({"a", "bb"}) == "a, bb");
  // A 16 MB key (attack finding 7) becomes its first 64 bytes and "...".
  const std::string huge(16 << 20, 'k');
  CHECK(field_names_for_log({huge}) == std::string(64, 'k') + "...");
  // At most 8 names, then how many more.
  std::vector<std::string> many;
  for (int i = 0; i < 11; ++i) many.push_back("f" + std::to_string(i));
  CHECK(field_names_for_log(many) == "f0, f1, f2, f3, f4, f5, f6, f7, ... 3 more");
  // 64 bytes are kept whole; a cut never splits a UTF-8 character ("é" is 2 bytes).
  CHECK(field_names_for_log({std::string(62, 'x') + "\xc3\xa9"}) ==
        std::string(62, 'x') + "\xc3\xa9");
  CHECK(field_names_for_log({std::string(63, 'x') + "\xc3\xa9"}) == std::string(63, 'x') + "...");
}
