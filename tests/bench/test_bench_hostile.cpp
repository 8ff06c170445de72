// The load generator against a hostile or broken server (issue 23, item 6): an endless SSE
// stream, a lying Content-Length, a huge or endless error body, an oversized event, usage counts
// of 2^62 or below zero. Each such request fails alone with an error that names the problem;
// the others succeed and run_requests returns (the ctest timeout is the guard against a request
// that never ends: the old client streamed an endless body for ever).
#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "bench/load_client.h"
#include "bench/metrics.h"
#include "fake_openai_server.h"

using namespace octet::bench;
using octet::testing::FakeRequest;
using octet::testing::FakeServer;

namespace {

// Sends until the client goes away (send fails); returns then.
void flood(int fd, const std::string& piece) {
  while (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) > 0) {
  }
}

// Waits until the client closes the connection.
void wait_for_close(int fd) {
  char c;
  while (::recv(fd, &c, 1, 0) > 0) {
  }
}

const std::string kText = "{\"choices\":[{\"text\":\"t\"}]}";

void hostile(const FakeRequest& req, int fd) {
  const std::string prompt = nlohmann::json::parse(req.body)["prompt"];
  if (prompt == "ok") {
    FakeServer::start_sse(fd);
    FakeServer::event(fd, kText);
    FakeServer::event(fd, "{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}");
    return FakeServer::event(fd, "[DONE]");
  }
  if (prompt == "pings for ever") {  // never any text, never an end, as fast as it can
    FakeServer::start_sse(fd);
    return flood(fd, ": ping\n\n");
  }
  if (prompt == "text for ever") {
    FakeServer::start_sse(fd);
    return flood(fd, "data: " + kText + "\n\n");
  }
  if (prompt == "drip for ever") {  // one text event every 20 ms, never an end
    FakeServer::start_sse(fd);
    for (;;) {
      const std::string ev = "data: " + kText + "\n\n";
      if (::send(fd, ev.data(), ev.size(), MSG_NOSIGNAL) <= 0) return;
      FakeServer::sleep_ms(20);
    }
  }
  if (prompt == "lying length") {  // declares a petabyte
    FakeServer::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Content-Length: 1000000000000000\r\n\r\ndata: " + kText + "\n\n");
    return wait_for_close(fd);
  }
  if (prompt == "short length") {  // declares 1000 bytes, sends one event, then stalls
    FakeServer::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Content-Length: 1000\r\n\r\ndata: " + kText + "\n\n");
    return wait_for_close(fd);
  }
  if (prompt == "huge error") {  // a 100 MB error body, declared
    FakeServer::send_all(fd, "HTTP/1.1 500 Oops\r\nContent-Length: 100000000\r\n\r\n");
    return flood(fd, std::string(1 << 16, 'x'));
  }
  if (prompt == "endless error") {  // an error body without length that never ends
    FakeServer::send_all(fd, "HTTP/1.1 503 Busy\r\nConnection: close\r\n\r\n");
    return flood(fd, std::string(1 << 16, 'y'));
  }
  if (prompt == "endless chunked error") {
    FakeServer::send_all(fd, "HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n");
    return flood(fd, "8000\r\n" + std::string(0x8000, 'z') + "\r\n");
  }
  if (prompt == "huge event") {  // 17 MiB without an end of event
    FakeServer::start_sse(fd);
    FakeServer::send_all(fd, "data: \"" + std::string(17 << 20, 'e'));
    return wait_for_close(fd);
  }
  FakeServer::start_sse(fd);
  FakeServer::event(fd, kText);
  if (prompt == "usage 2^62")
    FakeServer::event(fd, "{\"choices\":[],\"usage\":{\"prompt_tokens\":4611686018427387904,"
                          "\"completion_tokens\":4611686018427387904}}");
  if (prompt == "usage negative")
    FakeServer::event(fd, "{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":-5}}");
  if (prompt == "usage 2^64-1")
    FakeServer::event(fd, "{\"choices\":[],\"usage\":{\"prompt_tokens\":18446744073709551615}}");
  FakeServer::event(fd, "[DONE]");
}

}  // namespace

namespace {

// Runs `prompts` against the hostile server, all at once; every record, in order.
std::vector<RequestRecord> run_all(const std::vector<std::string>& prompts, double timeout_s) {
  static FakeServer server(hostile);
  ClientOptions o;
  o.base = parse_base_url(server.url());
  o.model = "fake";
  o.request_timeout_s = timeout_s;
  std::vector<RequestSpec> reqs;
  for (const std::string& p : prompts) reqs.push_back({p, 1, 4});
  std::vector<RequestRecord> r;
  REQUIRE_NOTHROW(r = run_requests(o, reqs, std::vector<double>(reqs.size(), 0.0), std::nullopt));
  REQUIRE(r.size() == prompts.size());
  for (size_t i : {size_t(0), prompts.size() - 1}) {  // "ok" first and last: they succeed
    INFO(r[i].error);
    CHECK(r[i].success);
    CHECK(r[i].output_tokens == 1);
  }
  for (size_t i = 1; i + 1 < prompts.size(); ++i) {
    INFO(prompts[i] << ": " << r[i].error);
    CHECK(!r[i].success);
    CHECK(std::all_of(r[i].error.begin(), r[i].error.end(),  // one printable line
                      [](char c) { return c >= 0x20 && c < 0x7f; }));
  }
  return r;
}

}  // namespace

TEST_CASE("a hostile server: endless or stalled streams end at the request's deadline") {
  // The old client's per-operation timer never fired while data kept coming: it ran for ever.
  const std::vector<RequestRecord> r = run_all(
      {"ok", "pings for ever", "text for ever", "drip for ever", "short length", "ok"}, 1.5);
  CHECK_THAT(r[1].error, Catch::Contains("timed out after 1.5"));
  // A text flood ends at the deadline or at the text bound, whichever comes first.
  CHECK_THAT(r[2].error,
             Catch::Contains("timed out") || Catch::Contains("the limit of one response"));
  CHECK_THAT(r[3].error, Catch::Contains("timed out"));
  CHECK_THAT(r[4].error, Catch::Contains("timed out"));
}

TEST_CASE("a hostile server: lying lengths, huge bodies and events fail at their bound") {
  // A generous deadline: each of these must fail by its size bound, not by time. (The old
  // client reserved the declared petabyte and the whole run died of std::bad_alloc.)
  const std::vector<RequestRecord> r = run_all(
      {"ok", "lying length", "huge error", "endless error", "endless chunked error",
       "huge event", "ok"}, 60);
  CHECK_THAT(r[1].error,
             Catch::Contains("declares 1000000000000000 body bytes, over the 16777216-byte limit"));
  CHECK_THAT(r[2].error, Catch::Contains("HTTP 500 Oops (an error body of 100000000 bytes, over "
                                         "the 65536-byte limit, not read)"));
  CHECK_THAT(r[3].error, Catch::StartsWith("HTTP 503 Busy: yyyy") &&
                             Catch::Contains("(error body cut at 65536 bytes)"));
  CHECK_THAT(r[4].error, Catch::Contains("(error body cut at 65536 bytes)"));
  CHECK_THAT(r[5].error, Catch::Contains("an SSE event is longer than 16777216 bytes"));
}

TEST_CASE("a hostile server: usage that is not a token count fails the request") {
  const std::vector<RequestRecord> r =
      run_all({"ok", "usage 2^62", "usage negative", "usage 2^64-1", "ok"}, 60);
  CHECK_THAT(r[1].error,
             Catch::Contains("usage.completion_tokens = 4611686018427387904, not a token count"));
  CHECK_THAT(r[2].error, Catch::Contains("usage.completion_tokens = -5"));
  CHECK_THAT(r[3].error, Catch::Contains("usage.prompt_tokens = 18446744073709551615"));
}

TEST_CASE("SSE: parsing is linear in the bytes fed, events stay bounded") {
  // An 8 MiB event fed 64 bytes at a time (the old parser searched its whole buffer again on
  // every feed: minutes), then 200,000 events in one feed (it erased each from the front).
  RequestRecord r;
  SseAccumulator acc(r, /*chat=*/false);
  const std::string big = "data: {\"choices\":[{\"text\":\"" + std::string(8 << 20, 'a') + "\"}]}\n\n";
  for (size_t i = 0; i < big.size(); i += 64) acc.feed(big.substr(i, 64), 1.0);
  CHECK(r.generated_text.size() == size_t{8} << 20);
  const std::string ev = "data: " + kText + "\r\n\r\n";
  std::string many;
  for (int i = 0; i < 200000; ++i) many += ev;
  acc.feed(many, 2.0);
  CHECK(r.generated_text.size() == (size_t{8} << 20) + 200000);
  CHECK(r.itl.size() == 200000);
  // A JSON event nested 100,000 deep is refused, not built.
  RequestRecord deep;
  SseAccumulator acc2(deep, false);
  CHECK_THROWS_WITH(acc2.feed("data: " + std::string(100000, '[') + "\n\n", 0.0),
                    Catch::Contains("nests deeper than 64"));
}

TEST_CASE("token totals saturate instead of wrapping negative") {
  std::vector<RequestRecord> records(4);
  for (RequestRecord& r : records) {
    r.success = true;
    r.prompt_len = int64_t{1} << 62;
    r.output_tokens = int64_t{1} << 62;
    r.latency = 1;
  }
  const BenchmarkMetrics m = calculate_metrics(records, 1.0, nullptr, {}, {});
  CHECK(m.total_input == INT64_MAX);
  CHECK(m.total_output == INT64_MAX);
  CHECK(m.total_token_throughput == static_cast<double>(INT64_MAX));
}
