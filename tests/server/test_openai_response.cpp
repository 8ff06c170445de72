// Response bodies, SSE chunks, logprobs shapes, error shapes and HTTP framing, compared with
// hand-written expected text from OpenAI's API reference (object shapes) and RFC 9112
// (chunked transfer coding).
#include <type_traits>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/http/http_message.h"
#include "server/openai/openai_response.h"

// Response bodies are ordered (keys in the order built): parse expectations the same way, so
// that == compares key order too.
using json = nlohmann::ordered_json;
using namespace octet::server;

namespace {

const ResponseMeta kMeta{"cmpl-abc", 1700000000, "smol"};

std::string fake_text(int32_t id) {
  switch (id) {
    case 1: return "Hello";
    case 2: return " world";
    case 3: return "!";
    case 4: return "\xc3\xa9";  // é, two UTF-8 bytes, one code point
    default: {
      std::string s = "<";
      s += std::to_string(id);
      s += ">";
      return s;
    }
  }
}

octet::TokenLogprobs lp(int32_t id, float logprob, std::vector<std::pair<int32_t, float>> top) {
  octet::TokenLogprobs t;
  t.token_id = id;
  t.logprob = logprob;
  t.rank = 1;
  t.top = std::move(top);
  return t;
}

}  // namespace

TEST_CASE("SSE framing of a completion chunk", "[server][response]") {
  const json chunk = completion_chunk(kMeta, 0, "Hi", nullptr, nullptr, nullptr, false);
  // Keys in the order of OpenAI's (and vLLM's) completion chunk object.
  CHECK(sse_data(chunk) ==
        "data: {\"id\":\"cmpl-abc\",\"object\":\"text_completion\",\"created\":1700000000,"
        "\"model\":\"smol\",\"choices\":[{\"index\":0,\"text\":\"Hi\",\"logprobs\":null,"
        "\"finish_reason\":null,\"stop_reason\":null}]}\n\n");
  CHECK(std::string(kSseDone) == "data: [DONE]\n\n");
}

TEST_CASE("chat chunks: role delta, content, final finish_reason, usage null", "[server][response]") {
  const ResponseMeta meta{"chatcmpl-x", 5, "m"};
  const json role = chat_chunk(meta, 1, json{{"role", "assistant"}, {"content", ""}}, nullptr,
                               nullptr, nullptr, true);
  CHECK(role == json::parse(R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":5,
      "model":"m","choices":[{"index":1,"delta":{"role":"assistant","content":""},
      "logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null})"));
  const json last = chat_chunk(meta, 0, json::object(), nullptr, "stop", "###", false);
  CHECK(last == json::parse(R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":5,
      "model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop",
      "stop_reason":"###"}]})"));
  CHECK_FALSE(last.contains("usage"));
}

TEST_CASE("usage chunk: empty choices and the usage", "[server][response]") {
  const json u = usage_chunk(kMeta, "text_completion", Usage{7, 5, 3});
  CHECK(u == json::parse(R"({"id":"cmpl-abc","object":"text_completion","created":1700000000,
      "model":"smol","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,
      "total_tokens":12,"prompt_tokens_details":{"cached_tokens":3}}})"));
  // Without --enable-prompt-tokens-details (vLLM's default): the counts only.
  const json plain = usage_chunk(kMeta, "text_completion", Usage{7, 5, 3, false});
  CHECK(plain["usage"] == json::parse(R"({"prompt_tokens":7,"completion_tokens":5,
      "total_tokens":12})"));
}

TEST_CASE("non-streaming bodies", "[server][response]") {
  const json c = completion_response(kMeta, json::array({{{"index", 0}, {"text", "x"}}}), Usage{1, 2, 0});
  CHECK(c["object"] == "text_completion");
  CHECK(c["usage"]["total_tokens"] == 3);
  const json h = chat_response(kMeta, json::array(), Usage{});
  CHECK(h["object"] == "chat.completion");
  CHECK(h["choices"] == json::array());
}

TEST_CASE("completion logprobs: tokens, token_logprobs, top_logprobs, text_offset", "[server][response]") {
  int64_t offset = 0;
  const json a = completion_logprobs({lp(1, -0.5f, {{1, -0.5f}, {2, -1.5f}}), lp(4, -2.0f, {{3, -1.0f}})},
                                     fake_text, &offset, false);
  // vLLM's order: the chosen token first, then the top entries by rank.
  CHECK(a == json::parse(R"({"tokens":["Hello","é"],"token_logprobs":[-0.5,-2.0],
      "top_logprobs":[{"Hello":-0.5," world":-1.5},{"é":-2.0,"!":-1.0}],
      "text_offset":[0,5]})"));
  CHECK(offset == 6);  // "Hello" (5) + "é" (1 code point)
  // Continuing from offset 6 (a later streamed chunk), and concatenation.
  const json b = completion_logprobs({lp(2, -0.25f, {})}, fake_text, &offset, false);
  CHECK(b["text_offset"] == json::array({6}));
  CHECK(b["top_logprobs"] == json::parse(R"([{" world":-0.25}])"));
  json ab = a;
  append_completion_logprobs(ab, b);
  CHECK(ab["tokens"] == json::array({"Hello", "é", " world"}));
  CHECK(ab["text_offset"] == json::array({0, 5, 6}));
}

// The accumulator is appended to in place (by reference), never taken and returned by value:
// a copy of everything accumulated per update made a 2000-token response cost minutes.
static_assert(std::is_same_v<decltype(&append_completion_logprobs), void (*)(json&, json)>);

TEST_CASE("append_completion_logprobs accumulates in place from null", "[server][response]") {
  json acc;  // null: the first update becomes the accumulator
  int64_t offset = 0;
  for (int32_t id : {1, 2, 4, 2}) {
    json update = completion_logprobs({lp(id, -1.0f, {})}, fake_text, &offset, false);
    append_completion_logprobs(acc, std::move(update));
  }
  // fake_text: 1 "Hello" (5), 2 " world" (6), 4 "é" (1 code point).
  CHECK(acc == json::parse(R"({"tokens":["Hello"," world","é"," world"],
      "token_logprobs":[-1.0,-1.0,-1.0,-1.0],
      "top_logprobs":[{"Hello":-1.0},{" world":-1.0},{"é":-1.0},{" world":-1.0}],
      "text_offset":[0,5,11,12]})"));
  // An empty update leaves it unchanged.
  const json before = acc;
  append_completion_logprobs(acc, completion_logprobs({}, fake_text, &offset, false));
  CHECK(acc == before);
}

TEST_CASE("echoed prompt logprobs: the first token has none", "[server][response]") {
  int64_t offset = 0;
  const json p = completion_logprobs({lp(1, 0.0f, {}), lp(2, -3.0f, {{3, -0.1f}})}, fake_text,
                                     &offset, true);
  CHECK(p == json::parse(R"({"tokens":["Hello"," world"],"token_logprobs":[null,-3.0],
      "top_logprobs":[null,{" world":-3.0,"!":-0.1}],"text_offset":[0,5]})"));
}

TEST_CASE("completion top_logprobs: the chosen token is the first key on the wire",
          "[server][response]") {
  // vLLM's test_return_tokens_as_ids reads the first key of each top_logprobs dict as the
  // token. "!" chosen below the top entry " world" (which sorts first as a string).
  int64_t offset = 0;
  const json a = completion_logprobs({lp(3, -1.25f, {{2, -0.5f}, {3, -1.25f}}),
                                      lp(3, -2.0f, {{2, -0.5f}, {1, -1.0f}})},
                                     fake_text, &offset, false);
  CHECK(dump(a["top_logprobs"]) == R"([{"!":-1.25," world":-0.5},{"!":-2.0," world":-0.5,"Hello":-1.0}])");
  // Two ids with one string: the first place, the later logprob (a Python dict).
  const json dup = completion_logprobs({lp(7, -3.0f, {{2, -0.5f}, {8, -2.0f}})},
                                       [](int32_t id) { return id == 8 ? std::string("<7>") : fake_text(id); },
                                       &offset, false);
  CHECK(dump(dup["top_logprobs"]) == R"([{"<7>":-2.0," world":-0.5}])");
}

TEST_CASE("vLLM prompt_logprobs: null, then the token and the top k by id", "[server][response]") {
  octet::TokenLogprobs second = lp(2, -3.0f, {{3, -0.1f}, {1, -2.5f}, {2, -3.0f}});
  second.rank = 3;
  const json p = prompt_logprobs_json({lp(1, 0.0f, {}), second}, fake_text, 2);
  // vLLM's order: the prompt token first, then the top k by rank.
  CHECK(p == json::parse(R"([null,{
      "2":{"logprob":-3.0,"rank":3,"decoded_token":" world"},
      "3":{"logprob":-0.1,"rank":1,"decoded_token":"!"},
      "1":{"logprob":-2.5,"rank":2,"decoded_token":"Hello"}}])"));
  // top_k 0: the prompt token alone.
  CHECK(prompt_logprobs_json({lp(1, 0.0f, {}), second}, fake_text, 0) == json::parse(
      R"([null,{"2":{"logprob":-3.0,"rank":3,"decoded_token":" world"}}])"));
}

TEST_CASE("chat logprobs: content entries with bytes and top_logprobs", "[server][response]") {
  const json c = chat_logprobs({lp(4, -0.5f, {{4, -0.5f}, {1, -1.0f}, {2, -2.0f}})}, fake_text, 2);
  CHECK(c == json::parse(R"({"content":[{"token":"é","logprob":-0.5,"bytes":[195,169],
      "top_logprobs":[{"token":"é","logprob":-0.5,"bytes":[195,169]},
                      {"token":"Hello","logprob":-1.0,"bytes":[72,101,108,108,111]}]}],
      "refusal":null})"));
  const json none = chat_logprobs({lp(3, -1.0f, {{3, -1.0f}})}, fake_text, 0);
  CHECK(none["content"][0]["top_logprobs"] == json::array());
  // vLLM: the first top_k of the sampled token and then the top entries by rank, so the sampled
  // token comes first even below rank 1 (or outside the top k).
  const json second = chat_logprobs({lp(3, -1.0f, {{1, -0.5f}, {3, -1.0f}, {2, -2.0f}})},
                                    fake_text, 3);
  CHECK(second["content"][0]["top_logprobs"] == json::parse(R"([
      {"token":"!","logprob":-1.0,"bytes":[33]},
      {"token":"Hello","logprob":-0.5,"bytes":[72,101,108,108,111]},
      {"token":" world","logprob":-2.0,"bytes":[32,119,111,114,108,100]}])"));
  const json outside = chat_logprobs({lp(3, -4.0f, {{1, -0.5f}, {2, -1.0f}})}, fake_text, 2);
  CHECK(outside["content"][0]["top_logprobs"] == json::parse(R"([
      {"token":"!","logprob":-4.0,"bytes":[33]},
      {"token":"Hello","logprob":-0.5,"bytes":[72,101,108,108,111]}])"));
}

TEST_CASE("finish_reason and stop_reason", "[server][response]") {
  CHECK(finish_reason_json(false, "stop").is_null());
  CHECK(finish_reason_json(true, "length") == "length");
  CHECK(stop_reason_json("", {}).is_null());
  CHECK(stop_reason_json("###", {"###"}) == "###");
  CHECK(stop_reason_json("2", {}) == 2);        // a stop token id
  CHECK(stop_reason_json("12", {"12"}) == "12");  // a stop string that looks like a number
}

TEST_CASE("random ids: prefix and 32 hex digits, distinct", "[server][response]") {
  const std::string a = random_id("chatcmpl-"), b = random_id("chatcmpl-");
  CHECK(a.size() == 9 + 32);
  CHECK(a.rfind("chatcmpl-", 0) == 0);
  CHECK(a.find_first_not_of("0123456789abcdef", 9) == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("dump replaces invalid UTF-8", "[server][response]") {
  CHECK(dump(json{{"t", std::string("a\xff")}}) == "{\"t\":\"a\xef\xbf\xbd\"}");
}

TEST_CASE("OpenAI error shape", "[server][errors]") {
  CHECK(error_json(400, "bad", "top_p") ==
        nlohmann::json::parse(R"({"error":{"message":"bad","type":"invalid_request_error",
                    "param":"top_p","code":null}})"));
  CHECK(error_json(404, "The model `x` does not exist.", "model", "model_not_found") ==
        nlohmann::json::parse(R"({"error":{"message":"The model `x` does not exist.",
                    "type":"invalid_request_error","param":"model","code":"model_not_found"}})"));
  CHECK(error_json(503, "busy") ==
        nlohmann::json::parse(R"({"error":{"message":"busy","type":"server_error","param":null,"code":null}})"));
  CHECK(error_json(ApiError(413, "too big"))["error"]["type"] == "invalid_request_error");
  CHECK(error_json(ApiError(500, "boom"))["error"]["type"] == "server_error");
}

TEST_CASE("HTTP framing: full response, SSE head, chunks", "[server][http]") {
  CHECK(serialize_response(200, "application/json", "{}", true) ==
        "HTTP/1.1 200 OK\r\nServer: octet\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\n\r\n{}");
  CHECK(serialize_response(404, "application/json", "x", false) ==
        "HTTP/1.1 404 Not Found\r\nServer: octet\r\nContent-Type: application/json\r\n"
        "Connection: close\r\nContent-Length: 1\r\n\r\nx");
  CHECK(sse_head(true) ==
        "HTTP/1.1 200 OK\r\nServer: octet\r\nContent-Type: text/event-stream\r\n"
        "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK(http_chunk("data: [DONE]\n\n") == "e\r\ndata: [DONE]\n\n\r\n");
  CHECK(http_chunk(std::string(26, 'a')) == "1a\r\n" + std::string(26, 'a') + "\r\n");
  CHECK(http_chunk("").empty());
  CHECK(std::string(kLastChunk) == "0\r\n\r\n");
}

TEST_CASE("whole-vocabulary logprob dicts: chosen token first, every id once, in rank order",
          "[server][response]") {
  // 20,000 alternatives (a whole-vocabulary request builds ~50,000 per token): the dicts keep
  // the chosen token first, then each id once in the order given, values as given.
  std::vector<std::pair<int32_t, float>> top;
  for (int32_t id = 10; id < 20010; ++id) top.push_back({id, -0.001f * static_cast<float>(id)});
  const octet::TokenLogprobs chosen = lp(5000, -5.0f, top);  // also ranked among the top
  const json p = prompt_logprobs_json({lp(1, 0.0f, {}), chosen}, fake_text, 20000);
  REQUIRE(p.size() == 2);
  const json& m = p[1];
  REQUIRE(m.size() == 20000);  // 5000 is in the top list: one key
  auto it = m.begin();
  CHECK(it.key() == "5000");
  CHECK((++it).key() == "10");
  CHECK(m["5000"]["rank"] == 4991);  // its place in the top list (ids from 10)
  CHECK(m["20009"]["rank"] == 20000);
  CHECK(m["20009"]["decoded_token"] == "<20009>");
  int64_t offset = 0;
  const json c = completion_logprobs({chosen}, fake_text, &offset, false);
  const json& alts = c["top_logprobs"][0];
  REQUIRE(alts.size() == 20000);
  CHECK(alts.begin().key() == "<5000>");
  // An id listed twice is one key, at its first place, with the last value (a Python dict).
  const json d = completion_logprobs({lp(2, -0.5f, {{7, -0.25f}, {2, -0.5f}, {7, -0.75f}})},
                                     fake_text, &offset, false);
  CHECK(d["top_logprobs"][0].dump() == R"({" world":-0.5,"<7>":-0.75})");
}
