// The load generator's HTTP side (bench/load_client.h): SSE parsing with vLLM's timing rules
// (exact, fed by hand with arrival times), URLs and request bodies, and one run against a
// scripted socket server with known delays (generous bounds: the machine is shared).
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "bench/load_client.h"
#include "fake_openai_server.h"

using namespace octet::bench;
using octet::testing::FakeRequest;
using octet::testing::FakeServer;

namespace {

std::string text_chunk(const std::string& t) {
  return "data: {\"choices\":[{\"index\":0,\"text\":" + nlohmann::json(t).dump() +
         ",\"finish_reason\":null}],\"usage\":null}\n\n";
}

}  // namespace

TEST_CASE("SSE: TTFT at the first text chunk, ITL per later text chunk, E2EL at the last") {
  RequestRecord r;
  r.start_time = 10.0;
  SseAccumulator acc(r, /*chat=*/false);
  // A chunk with empty text (e.g. a role or special token) is not a token chunk.
  acc.feed(text_chunk(""), 10.05);
  CHECK(!acc.saw_text());
  acc.feed(text_chunk("Once"), 10.25);  // TTFT 0.25
  // An event split across reads, then two events in one read (the same arrival time).
  const std::string two = text_chunk(" upon") + text_chunk(" a");
  acc.feed(two.substr(0, 17), 10.30);
  acc.feed(two.substr(17), 10.40);     // gaps 0.15 and 0
  acc.feed(": ping\n\n", 10.45);        // a comment is no event
  acc.feed(text_chunk(" time"), 10.60);  // gap 0.20
  acc.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4}}\n\n",
           10.70);
  acc.feed("data: [DONE]\n\n", 10.71);
  CHECK(acc.saw_text());
  CHECK(acc.saw_done());
  CHECK(r.ttft == Approx(0.25).margin(1e-12));
  REQUIRE(r.itl.size() == 3);
  CHECK(r.itl[0] == Approx(0.15).margin(1e-12));
  CHECK(r.itl[1] == Approx(0.0).margin(1e-12));
  CHECK(r.itl[2] == Approx(0.20).margin(1e-12));
  CHECK(r.latency == Approx(0.60).margin(1e-12));  // the last text chunk, not [DONE]
  CHECK(r.generated_text == "Once upon a time");
  CHECK(r.output_tokens == 4);
  CHECK(r.prompt_len == 5);
}

TEST_CASE("SSE: chat deltas, CRLF separators, and an event that is not JSON") {
  RequestRecord r;
  SseAccumulator acc(r, /*chat=*/true);
  acc.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n", 1.0);
  acc.feed("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\n", 2.0);
  acc.feed("data: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n", 2.5);
  CHECK(r.ttft == 2.0);
  CHECK(r.itl == std::vector<double>{0.5});
  CHECK(r.generated_text == "Hi!");
  RequestRecord bad;
  SseAccumulator acc2(bad, false);
  CHECK_THROWS_WITH(acc2.feed("data: {oops\n\n", 1.0), Catch::Contains("not JSON"));
}

TEST_CASE("base URLs") {
  BaseUrl b = parse_base_url("http://127.0.0.1:8000");
  CHECK(b.host == "127.0.0.1");
  CHECK(b.port == "8000");
  CHECK(b.prefix == "");
  b = parse_base_url("http://example.org/api/");
  CHECK(b.port == "80");
  CHECK(b.prefix == "/api");
  CHECK_THROWS_AS(parse_base_url("https://x:1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("127.0.0.1:8000"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://x:0"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://x:70000"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://x:"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://x/a b"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://x/a\r\nX-Injected: 1"), std::invalid_argument);
  b = parse_base_url("http://[::1]:8001/v1");
  CHECK(b.host == "::1");
  CHECK(b.port == "8001");
  CHECK(b.prefix == "/v1");
  // A megabyte-long path is scanned, not recursed over (std::regex overflowed the stack).
  b = parse_base_url("http://x/" + std::string(1 << 20, 'a'));
  CHECK(b.prefix.size() == (size_t{1} << 20) + 1);
}

TEST_CASE("request bodies ask for a stream with usage") {
  ClientOptions o;
  o.model = "m";
  o.ignore_eos = true;
  const nlohmann::json c = request_body(o, {"hello", 1, 7});
  CHECK(c["prompt"] == "hello");
  CHECK(c["max_tokens"] == 7);
  CHECK(c["stream"] == true);
  CHECK(c["stream_options"]["include_usage"] == true);
  CHECK(c["ignore_eos"] == true);
  CHECK(!c.contains("temperature"));
  o.endpoint = "/v1/chat/completions";
  o.temperature = 0.0;
  const nlohmann::json chat = request_body(o, {"hello", 1, 7});
  CHECK(chat["messages"][0]["content"] == "hello");
  CHECK(chat["max_completion_tokens"] == 7);
  CHECK(chat["temperature"] == 0.0);
}

TEST_CASE("a scripted server: delays, usage and failures as the records say") {
  // "slow": 200 ms to the first text, then 3 more chunks 100 ms apart, usage 4 tokens.
  // "fail": HTTP 500. "empty": a stream without any text. "garbage": not SSE JSON.
  FakeServer server([](const FakeRequest& req, int fd) {
    const nlohmann::json body = nlohmann::json::parse(req.body);
    const std::string prompt = body["prompt"];
    if (prompt == "fail") return FakeServer::reply(fd, 500, "{\"error\":\"boom\"}");
    FakeServer::start_sse(fd);
    if (prompt == "empty") return FakeServer::event(fd, "[DONE]");
    if (prompt == "garbage") return FakeServer::event(fd, "{not json");
    FakeServer::sleep_ms(200);
    for (int i = 0; i < 4; ++i) {
      if (i) FakeServer::sleep_ms(100);
      FakeServer::event(fd, "{\"choices\":[{\"text\":\"t\"}]}");
    }
    FakeServer::event(fd, "{\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4}}");
    FakeServer::event(fd, "[DONE]");
  });
  ClientOptions o;
  o.base = parse_base_url(server.url());
  o.model = "fake";
  const std::vector<RequestSpec> reqs = {
      {"slow", 3, 4}, {"fail", 3, 4}, {"empty", 3, 4}, {"garbage", 3, 4}, {"slow", 3, 4}};
  // At most 2 in flight: the fifth waits for a slot (the short ones free them at once).
  const std::vector<RequestRecord> r = run_requests(o, reqs, {0, 0, 0, 0, 0}, 2);
  REQUIRE(r.size() == 5);
  for (size_t i : {size_t(0), size_t(4)}) {
    INFO("request " << i << ": " << r[i].error);
    REQUIRE(r[i].success);
    CHECK(r[i].ttft >= 0.195);
    CHECK(r[i].ttft < 0.5);
    REQUIRE(r[i].itl.size() == 3);
    for (double g : r[i].itl) {
      // A gap can come out under the server's 100 ms when the chunk before it was late (seen
      // once: 94.8 ms under the sanitizer tree on a loaded machine); the sum is checked below.
      CHECK(g >= 0.05);
      CHECK(g < 0.3);
    }
    CHECK(r[i].latency >= 0.495);  // 200 + 3 x 100 ms
    CHECK(r[i].latency < 1.0);
    CHECK(r[i].output_tokens == 4);
    CHECK(r[i].prompt_len == 7);
    CHECK(r[i].generated_text == "tttt");
  }
  CHECK(!r[1].success);
  CHECK_THAT(r[1].error, Catch::Contains("HTTP 500") && Catch::Contains("boom"));
  CHECK(!r[2].success);
  CHECK_THAT(r[2].error, Catch::Contains("no text"));
  CHECK(!r[3].success);
  CHECK_THAT(r[3].error, Catch::Contains("not JSON"));
  // Slots: 0 and 1 start; 1, 2, 3 fail at once, so 4 starts well before 0 ends.
  CHECK(r[4].client_queue_time < 0.2);
}

TEST_CASE("a concurrency limit of 1 queues the second request behind the first") {
  FakeServer server([](const FakeRequest&, int fd) {
    FakeServer::start_sse(fd);
    FakeServer::sleep_ms(150);
    FakeServer::event(fd, "{\"choices\":[{\"text\":\"x\"}]}");
    FakeServer::event(fd, "[DONE]");
  });
  ClientOptions o;
  o.base = parse_base_url(server.url());
  const std::vector<RequestRecord> r = run_requests(o, {{"a", 1, 1}, {"b", 1, 1}}, {0, 0}, 1);
  REQUIRE(r[0].success);
  REQUIRE(r[1].success);
  CHECK(r[1].client_queue_time >= 0.145);             // waited for the first to finish
  CHECK(r[1].start_time >= r[0].start_time + r[0].latency - 1e-3);
}

TEST_CASE("a refused connection is a failed request, not a crash, http_get throws") {
  int port = 0;
  {
    FakeServer gone([](const FakeRequest&, int) {});
    port = gone.port();
  }  // closed: nothing listens there now
  ClientOptions o;
  o.base = parse_base_url("http://127.0.0.1:" + std::to_string(port));
  const std::vector<RequestRecord> r = run_requests(o, {{"a", 1, 1}}, {0}, std::nullopt);
  CHECK(!r[0].success);
  CHECK_THAT(r[0].error, Catch::Contains("cannot connect"));
  CHECK_THROWS_WITH(http_get(o, "/v1/models", 5), Catch::Contains("cannot connect"));
}
