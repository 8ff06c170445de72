// Hostile request bodies (issue 9, classes 2 and 6): JSON nested past the depth limit, number
// literals beyond a double, numbers beyond the range of the field's type (int64, int32 token
// ids, float sampling values), seeds and max_tokens whose arithmetic would overflow, and error
// texts that stay short on huge or deep values.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/generation_job.h"
#include "server/openai/openai_request.h"
#include "server/openai/request_checks.h"

using nlohmann::json;
using namespace octet;
using namespace octet::server;

namespace {

std::string nested_array(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

ApiError body_error(const std::string& text) {
  try {
    parse_json_body(text);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("no ApiError for a body of " << text.size() << " bytes");
  return ApiError(0, "");
}

/// The ApiError of parsing `body` (as text, so that numbers keep their literal form).
ApiError request_error(const std::string& text, bool chat = false) {
  try {
    const json body = parse_json_body(text);
    if (chat) parse_chat_request(body);
    else parse_completion_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("no ApiError for " << text);
  return ApiError(0, "");
}

/// The HTTP error of a prompt of n_prompt tokens asking for `requested` tokens (nullopt: up to
/// the limit), as a request meets it: resolve_max_tokens, then the engine's context rule
/// (check_context_length, what Engine::add_requests runs), mapped by to_api_error as the
/// HTTP edge does.
ApiError resolve_error(int64_t n_prompt, std::optional<int64_t> requested, int64_t limit,
                       Endpoint endpoint = Endpoint::kCompletions) {
  try {
    const int64_t m = resolve_max_tokens(n_prompt, requested, limit);
    check_context_length(n_prompt, m, limit);
  } catch (const RequestError& e) {
    return to_api_error(e, endpoint == Endpoint::kChatCompletions ? "messages" : "prompt");
  }
  FAIL("no RequestError");
  return ApiError(0, "");
}

}  // namespace

TEST_CASE("bodies nested deeper than kMaxJsonDepth are a 400, without recursion",
          "[server][request][limits]") {
  STATIC_REQUIRE(kMaxJsonDepth == 64);
  // The issue's 100,000-deep array (dump() of it overflowed the stack).
  for (size_t depth : {size_t{65}, size_t{100000}, size_t{1000000}}) {
    INFO("depth " << depth);
    const ApiError e = body_error(nested_array(depth));
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()) == "the JSON body is nested deeper than 64 levels");
  }
  // Objects count as arrays do; unclosed brackets too (the scan needs no valid JSON).
  std::string objects;
  for (int i = 0; i < 70; ++i) objects += "{\"a\":";
  CHECK(body_error(objects).status() == 400);
  CHECK(std::string(body_error(std::string(200000, '[')).what()).find("nested deeper") !=
        std::string::npos);
  // At the limit: parsed.
  CHECK(parse_json_body(nested_array(64)).is_array());
  // Brackets inside strings (escaped quotes included) are not nesting.
  const std::string in_string = "{\"prompt\": \"\\\"" + std::string(1000, '[') + "\"}";
  CHECK(parse_json_body(in_string)["prompt"].get<std::string>().size() == 1001);
  // A real chat body with content parts is far below the limit.
  CHECK_NOTHROW(parse_json_body(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "hi"}]}], "stream_options": {"include_usage": true}})"));
}

TEST_CASE("JSON text inside string fields nests at most kMaxJsonDepth deep",
          "[server][request][limits]") {
  // An assistant tool call's arguments and a schema sent as text are parsed again: a
  // 100,000-deep array there crashed the chat template's copy of the messages (stack), and a
  // deep schema made xgrammar's parser grow without bound.
  const auto chat_with_arguments = [](const std::string& arguments) {
    return json{{"messages",
                 {{{"role", "user"}, {"content", "hi"}},
                  {{"role", "assistant"},
                   {"tool_calls",
                    {{{"id", "c1"},
                      {"type", "function"},
                      {"function", {{"name", "f"}, {"arguments", arguments}}}}}}},
                  {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "x"}}}}}
        .dump();
  };
  const std::string args_param = "messages[1].tool_calls[0].function.arguments";
  for (size_t depth : {size_t{65}, size_t{100000}}) {
    INFO("depth " << depth);
    const std::string deep = std::string(depth, '[') + "1" + std::string(depth, ']');
    ApiError e = request_error(chat_with_arguments(deep), /*chat=*/true);
    CHECK(e.status() == 400);
    CHECK(e.param() == args_param);
    CHECK(e.message() == "'" + args_param + "' is nested deeper than 64 levels");
    // Schemas as text: vLLM's structured_outputs.json and guided_json.
    e = request_error(json{{"prompt", "p"}, {"structured_outputs", {{"json", deep}}}}.dump());
    CHECK(e.param() == "structured_outputs.json");
    CHECK(e.message().find("nested deeper than 64") != std::string::npos);
    e = request_error(json{{"prompt", "p"}, {"guided_json", "{\"a\":" + deep + "}"}}.dump());
    CHECK(e.param() == "guided_json");
    CHECK(e.message().find("nested deeper than 64") != std::string::npos);
  }
  // At the limit: accepted (the arguments keep their value).
  const std::string ok = std::string(64, '[') + "1" + std::string(64, ']');
  const GenerateRequest r = parse_chat_request(parse_json_body(chat_with_arguments(ok)));
  CHECK(r.messages.at(1)["tool_calls"].at(0)["function"]["arguments"] == json::parse(ok));
  CHECK(request_error(chat_with_arguments("[1"), true).message() ==
        "'" + args_param + "' is not valid JSON");
}

TEST_CASE("error messages keep bytes after a NUL", "[server][request][limits]") {
  // what() is a C string; the reply's message is the whole text.
  const ApiError e = bad_request(std::string("'a\0b' is not supported", 22), "a");
  CHECK(error_json(e)["error"]["message"].get<std::string>() ==
        std::string("'a\0b' is not supported", 22));
  const RequestError re(RequestErrorKind::InvalidRequest, std::string("x\0y", 3), "p");
  CHECK(error_json(to_api_error(re))["error"]["message"].get<std::string>() ==
        std::string("x\0y", 3));
}

TEST_CASE("number literals beyond a double are a 400, not a 500", "[server][request][limits]") {
  for (const char* text : {R"({"temperature": 1e999999})", R"({"prompt": [1e400]})",
                           R"({"max_tokens": -1e999})"}) {
    INFO(text);
    const ApiError e = body_error(text);
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()).rfind("malformed JSON: ", 0) == 0);
  }
}

TEST_CASE("malformed JSON messages are bounded", "[server][request][limits]") {
  // A 1 MB string with a control character at its end: nlohmann quotes the token it read.
  const std::string text = "{\"prompt\": \"" + std::string(1000000, 'a') + "\x01\"}";
  const ApiError e = body_error(text);
  CHECK(e.status() == 400);
  CHECK(std::string(e.what()).size() < 300);
}

TEST_CASE("describe_json is short and safe on any value", "[server][request][limits]") {
  CHECK(describe_json(json(5)) == "5");
  CHECK(describe_json(json(nullptr)) == "null");
  CHECK(describe_json(json("ab\"c")) == R"("ab\"c")");
  CHECK(describe_json(json::parse("[1, [2], {}, {\"a\": 1}, \"x\"]")) ==
        R"([1, [...], {}, {...}, "x"])");
  CHECK(describe_json(json{{"k", json::array()}}) == R"({"k": []})");
  // A long string: cut at max_chars bytes, at a character boundary ("é" is 2 bytes).
  std::string s;
  for (int i = 0; i < 1000; ++i) s += "\xc3\xa9";
  const std::string d = describe_json(json(s), 9);
  CHECK(d == "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"...");
  // A long array: stops soon after max_chars.
  const std::string a = describe_json(json(std::vector<int>(100000, 123)));
  CHECK(a.size() < 100);
  CHECK(a.substr(a.size() - 6) == ", ...]");
  // A deep value (built by the iterative parser; its destruction is iterative too).
  json deep = json::parse(nested_array(100000));
  CHECK(describe_json(deep) == "[[...]]");
  CHECK(describe_json(deep[0]) == "[[...]]");
  CHECK(truncate_text("abcdef", 3) == "abc...");
  CHECK(truncate_text("abc", 3) == "abc");
  CHECK(truncate_text("a\xc3\xa9", 2) == "a...");
}

TEST_CASE("error texts built from request values never dump them whole",
          "[server][request][limits]") {
  // A deep token id entry (within the depth limit) and a huge string: short messages.
  const std::string deep_prompt = "{\"prompt\": [1, " + nested_array(60) + "]}";
  ApiError e = request_error(deep_prompt);
  CHECK(e.param() == "prompt");
  CHECK(std::string(e.what()).size() < 200);
  e = request_error("{\"prompt\": [1, \"" + std::string(100000, 'x') + "\"]}");
  CHECK(std::string(e.what()).size() < 200);
  e = request_error("{\"prompt\": \"hi\", \"logit_bias\": {\"" + std::string(100000, '7') +
                    "\": 1}}");
  CHECK(e.param() == "logit_bias");
  CHECK(std::string(e.what()).size() < 200);
  e = request_error(R"({"messages": [{"role": "user", "content": [{"type": ")" +
                        std::string(100000, 'y') + "\"}]}]}",
                    /*chat=*/true);
  CHECK(e.param() == "messages[0].content[0].type");
  CHECK(std::string(e.what()).size() < 200);
}

TEST_CASE("every numeric field is validated into the range its type holds",
          "[server][request][limits]") {
  const struct {
    const char* fields;  // JSON members added to a completion body
    const char* param;
  } completion_cases[] = {
      // Floats: a finite double beyond FLT_MAX must not become an inf float.
      {R"("temperature": 1e300)", "temperature"},
      {R"("temperature": -1e300)", "temperature"},
      {R"("top_p": 1e300)", "top_p"},
      {R"("min_p": 1e39)", "min_p"},
      {R"("presence_penalty": 1e300)", "presence_penalty"},
      {R"("frequency_penalty": -1e300)", "frequency_penalty"},
      {R"("repetition_penalty": 1e300)", "repetition_penalty"},
      // The issue's example: logits / 1e-40 overflow (now outside [0.01, 100]).
      {R"("repetition_penalty": 1e-40)", "repetition_penalty"},
      {R"("repetition_penalty": 0.001)", "repetition_penalty"},
      {R"("repetition_penalty": 101)", "repetition_penalty"},
      {R"("logit_bias": {"5": 1e300})", "logit_bias"},
      {R"("logit_bias": {"5": -100.5})", "logit_bias"},
      // logit_bias keys: decimal int32 ids only.
      {R"("logit_bias": {"2147483648": 1})", "logit_bias"},
      {R"("logit_bias": {"99999999999999999999": 1})", "logit_bias"},
      {R"("logit_bias": {"-1": 1})", "logit_bias"},
      {R"("logit_bias": {" 5": 1})", "logit_bias"},
      {R"("logit_bias": {"+5": 1})", "logit_bias"},
      {R"("logit_bias": {"5 ": 1})", "logit_bias"},
      {R"("logit_bias": {"1e3": 1})", "logit_bias"},
      {R"("logit_bias": {"": 1})", "logit_bias"},
      // Integers beyond int64 (unsigned literals, large floats), and beyond the field's range.
      {R"("n": 9223372036854775808)", "n"},
      {R"("n": 18446744073709551615)", "n"},
      {R"("n": 1e19)", "n"},
      {R"("n": 129)", "n"},
      {R"("max_tokens": 9223372036854775808)", "max_tokens"},
      {R"("max_tokens": -9223372036854775808)", "max_tokens"},
      {R"("min_tokens": 9223372036854775808)", "min_tokens"},
      {R"("logprobs": 9223372036854775807)", "logprobs"},
      {R"("logprobs": -9223372036854775808)", "logprobs"},
      {R"("prompt_logprobs": 9223372036854775807)", "prompt_logprobs"},
      {R"("seed": 9223372036854775808)", "seed"},
      {R"("seed": -9223372036854775809)", "seed"},
      {R"("priority": 9223372036854775808)", "priority"},
      {R"("priority": 1e19)", "priority"},
      {R"("top_k": 9223372036854775807)", "top_k"},
      {R"("top_k": 2147483648)", "top_k"},
      {R"("top_k": -9223372036854775808)", "top_k"},
      // Token ids are int32.
      {R"("stop_token_ids": [2147483648])", "stop_token_ids"},
      {R"("stop_token_ids": [9223372036854775808])", "stop_token_ids"},
      {R"("best_of": 9223372036854775808)", "best_of"},
  };
  for (const auto& c : completion_cases) {
    const std::string text = std::string(R"({"prompt": "hi", )") + c.fields + "}";
    INFO(text);
    const ApiError e = request_error(text);
    CHECK(e.status() == 400);
    CHECK(e.param() == c.param);
  }
  for (const char* prompt : {"[2147483648]", "[[1], [4294967296]]", "[-1]", "[1.5]"}) {
    INFO(prompt);
    const ApiError e = request_error(std::string(R"({"prompt": )") + prompt + "}");
    CHECK(e.param() == "prompt");
  }
  const struct {
    const char* fields;
    const char* param;
  } chat_cases[] = {
      {R"("max_completion_tokens": 9223372036854775808)", "max_completion_tokens"},
      {R"("max_tokens": 18446744073709551615)", "max_tokens"},
      {R"("logprobs": true, "top_logprobs": 9223372036854775807)", "top_logprobs"},
      {R"("temperature": 3.5e38)", "temperature"},
      {R"("n": -9223372036854775808)", "n"},
  };
  for (const auto& c : chat_cases) {
    const std::string text =
        std::string(R"({"messages": [{"role": "user", "content": "hi"}], )") + c.fields + "}";
    INFO(text);
    const ApiError e = request_error(text, /*chat=*/true);
    CHECK(e.status() == 400);
    CHECK(e.param() == c.param);
  }
  // The edges of each range are accepted.
  const GenerateRequest ok = parse_completion_request(parse_json_body(R"({"prompt": "hi",
      "temperature": 3.4e38, "repetition_penalty": 0.01, "top_k": 2147483647,
      "logit_bias": {"2147483647": -100, "0": 100}, "seed": 9223372036854775807,
      "max_tokens": 9223372036854775807, "priority": -9223372036854775808,
      "stop_token_ids": [2147483647], "n": 128})"));
  CHECK(ok.params.repetition_penalty == 0.01f);
  CHECK(ok.params.top_k == 2147483647);
  CHECK(ok.params.seed == std::numeric_limits<int64_t>::max());
  CHECK(ok.max_tokens == std::numeric_limits<int64_t>::max());
  CHECK(ok.priority == std::numeric_limits<int64_t>::min());
  CHECK(ok.params.logit_bias.size() == 2);
  // Every int64 is a seed (as vLLM), but -1 is "no seed".
  const GenerateRequest min_seed = parse_completion_request(
      parse_json_body(R"({"prompt": "hi", "seed": -9223372036854775808})"));
  CHECK(min_seed.params.seed == std::numeric_limits<int64_t>::min());
  CHECK_FALSE(parse_completion_request(parse_json_body(R"({"prompt": "hi", "seed": -1})"))
                  .params.seed);
}

TEST_CASE("out-of-range errors show the value as sent, not a float rounding of it",
          "[server][request][limits]") {
  // 1.0000001 is a float above 1: the message must not print it as "1".
  const ApiError min_p = request_error(R"({"prompt": "hi", "min_p": 1.0000001})");
  CHECK(min_p.param() == "min_p");
  CHECK_THAT(min_p.what(), Catch::Contains("got 1.0000001"));
  // Below the smallest float: not "got 0" (the value sent was not zero).
  const ApiError rp = request_error(R"({"prompt": "hi", "repetition_penalty": 1e-300})");
  CHECK(rp.param() == "repetition_penalty");
  CHECK_THAT(rp.what(), !Catch::Contains("got 0"));
  // A positive top_p stays positive, so it is valid (as vLLM, whose floats are doubles).
  const GenerateRequest ok =
      parse_completion_request(parse_json_body(R"({"prompt": "hi", "top_p": 1e-300})"));
  CHECK(ok.params.top_p > 0.0f);
  CHECK(ok.params.top_p == std::numeric_limits<float>::denorm_min());
}

TEST_CASE("choice seeds never overflow", "[server][request][limits]") {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  CHECK(choice_seed(5, 0) == 5);
  CHECK(choice_seed(5, 2) == 7);
  CHECK_FALSE(choice_seed(std::nullopt, 3));  // no seed stays none
  CHECK(choice_seed(-3, 2) == -1);            // a seed like any other in the engine
  CHECK(choice_seed(kMax, 0) == kMax);
  // Wrapping as the two's complements (the RNG seeds) do: 2^63 - 1 + 1 is 2^63 mod 2^64.
  CHECK(choice_seed(kMax, 1) == kMin);
  CHECK(choice_seed(kMax, 127) == kMin + 126);
  CHECK(choice_seed(kMax - 1, 1) == kMax);
  CHECK(choice_seed(-1, 1) == 0);
}

TEST_CASE("the context-length check never overflows and gives exact counts",
          "[server][request][limits]") {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // The issue's max_tokens 9223372036854775807 (the old message said -9223372036854775807).
  ApiError e = resolve_error(2, kMax, 256);
  CHECK(e.status() == 400);
  CHECK(e.code() == "context_length_exceeded");
  CHECK(e.param() == "prompt");
  CHECK(std::string(e.what()) ==
        "This model's maximum context length is 256 tokens. However, you requested "
        "9223372036854775809 tokens (2 in the prompt, 9223372036854775807 in the completion). "
        "Please reduce the length of the prompt or completion.");
  CHECK(std::string(e.what()).find('-') == std::string::npos);
  e = resolve_error(kMax, kMax, 256, Endpoint::kChatCompletions);
  CHECK(e.param() == "messages");
  CHECK(std::string(e.what()).find("you requested 18446744073709551614 tokens") !=
        std::string::npos);
  // Exact fit, one over, and up to the limit.
  CHECK(resolve_max_tokens(5, 251, 256) == 251);
  CHECK_NOTHROW(check_context_length(5, 251, 256));
  CHECK(std::string(resolve_error(5, 252, 256).what()).find("you requested 257 tokens (5 in") !=
        std::string::npos);
  CHECK(resolve_max_tokens(5, std::nullopt, 256) == 251);
  CHECK(resolve_error(256, std::nullopt, 256).code() == "context_length_exceeded");
  CHECK(resolve_error(256, std::nullopt, 256, Endpoint::kChatCompletions).param() == "messages");
  CHECK(resolve_error(300, 0, 256).code() == "context_length_exceeded");
  // min_tokens beyond what is left: the engine's SamplingParams rule names min_tokens.
  SamplingParams p;
  p.max_tokens = resolve_max_tokens(5, std::nullopt, 256);
  p.min_tokens = kMax;
  try {
    p.validate();
    FAIL("min_tokens > max_tokens accepted");
  } catch (const RequestError& e) {
    const ApiError a = to_api_error(e);
    CHECK(a.status() == 400);
    CHECK(a.param() == "min_tokens");
  }
}

namespace {

/// error_json of the engine error `e` as the HTTP edge maps it.
json mapped(const RequestError& e, const std::string& prompt_field = "prompt") {
  const ApiError a = to_api_error(e, prompt_field);
  json j = error_json(a);
  j["status"] = a.status();
  return j;
}

}  // namespace

TEST_CASE("each engine error kind maps to the status, type, code and param OpenAI clients expect",
          "[server][request][errors]") {
  // OpenAI: a bad field is 400 invalid_request_error with the field as param and code null.
  json j = mapped(RequestError(RequestErrorKind::InvalidRequest, "bad", "logit_bias"));
  CHECK(j == json::parse(R"({"status": 400, "error": {"message": "bad", "type":
        "invalid_request_error", "param": "logit_bias", "code": null}})"));
  j = mapped(RequestError(RequestErrorKind::InvalidRequest, "no field"));
  CHECK(j["error"]["param"].is_null());
  CHECK(j["error"]["code"].is_null());
  // Context overflow: 400, code context_length_exceeded, param the prompt field.
  j = mapped(RequestError(RequestErrorKind::ContextLengthExceeded, "too long", "prompt"));
  CHECK(j == json::parse(R"({"status": 400, "error": {"message": "too long", "type":
        "invalid_request_error", "param": "prompt", "code": "context_length_exceeded"}})"));
  j = mapped(RequestError(RequestErrorKind::ContextLengthExceeded, "too long", "prompt"),
             "messages");
  CHECK(j["error"]["param"] == "messages");
  // Unknown model: 404, code model_not_found, param model.
  j = mapped(RequestError(RequestErrorKind::ModelNotFound, "The model `x` does not exist.",
                          "model"));
  CHECK(j == json::parse(R"({"status": 404, "error": {"message":
        "The model `x` does not exist.", "type": "invalid_request_error", "param": "model",
        "code": "model_not_found"}})"));
  CHECK(std::string(request_error_kind_name(RequestErrorKind::ContextLengthExceeded)) ==
        "context_length_exceeded");
}

TEST_CASE("the engine's request rules throw the right kind with the field at fault",
          "[server][request][errors]") {
  const auto kind_param = [](auto&& f) -> std::pair<RequestErrorKind, std::string> {
    try {
      f();
    } catch (const RequestError& e) {
      return {e.kind(), e.param()};
    }
    FAIL("no RequestError");
    return {};
  };
  using K = RequestErrorKind;
  CHECK(kind_param([] { check_model_name("gpt-4", "served"); }) ==
        std::pair{K::ModelNotFound, std::string("model")});
  CHECK_NOTHROW(check_model_name("", "served"));  // absent: the served model
  CHECK_NOTHROW(check_model_name("served", "served"));
  CHECK(kind_param([] { check_token_ids({1, 512}, 512, "prompt"); }) ==
        std::pair{K::InvalidRequest, std::string("prompt")});
  CHECK(kind_param([] { check_token_ids({-1}, 512, "tokens"); }) ==
        std::pair{K::InvalidRequest, std::string("tokens")});
  CHECK_NOTHROW(check_token_ids({0, 511}, 512, "prompt"));
  CHECK(kind_param([] { check_context_length(10, 7, 16); }) ==
        std::pair{K::ContextLengthExceeded, std::string("prompt")});
  CHECK(kind_param([] { max_tokens_left(16, 16); }) ==
        std::pair{K::ContextLengthExceeded, std::string("prompt")});
  CHECK(max_tokens_left(15, 16) == 1);
  // A long model name is cut in the message (bounded error bodies).
  try {
    check_model_name(std::string(1000, 'm'), "served");
  } catch (const RequestError& e) {
    CHECK(std::string(e.what()).size() < 120);
  }
}

namespace {

/// A completion body {"prompt": "hi", "<key>": <value>}.
std::string body_with(const char* key, const json& value) {
  return json{{"prompt", "hi"}, {key, value}}.dump();
}

}  // namespace

TEST_CASE("stop strings, stop_token_ids and logit_bias entries are capped (issue 9, F1)",
          "[server][request][limits]") {
  using octet::kMaxLogitBiasEntries;
  using octet::kMaxStopStringBytes;
  using octet::kMaxStopStrings;
  using octet::kMaxStopTokenIds;
  // The attack sent 1,000,000 stop strings (and 1M stop_token_ids); each is a 400 naming the
  // field and saying the limit.
  json stops = json::array();
  for (int i = 0; i < 1000000; ++i) stops.push_back("s" + std::to_string(i));
  ApiError e = request_error(body_with("stop", stops));
  CHECK(e.status() == 400);
  CHECK(e.param() == "stop");
  CHECK_THAT(e.what(), Catch::Contains("at most 64 strings"));
  json ids = json::array();
  for (int i = 0; i < 1000000; ++i) ids.push_back(i % 100);
  e = request_error(body_with("stop_token_ids", ids));
  CHECK(e.param() == "stop_token_ids");
  CHECK_THAT(e.what(), Catch::Contains("at most 1024 ids"));
  // One over each bound fails, the bound itself passes.
  stops = json::array();
  for (size_t i = 0; i < kMaxStopStrings; ++i) stops.push_back("s" + std::to_string(i));
  CHECK(parse_completion_request(json::parse(body_with("stop", stops))).params.stop.size() ==
        kMaxStopStrings);
  stops.push_back("one more");
  CHECK(request_error(body_with("stop", stops)).param() == "stop");
  const std::string longest(kMaxStopStringBytes, 'x');
  CHECK_NOTHROW(parse_completion_request(json::parse(body_with("stop", longest))));
  e = request_error(body_with("stop", json::array({"ok", longest + "x"})));
  CHECK(e.param() == "stop");
  CHECK_THAT(e.what(), Catch::Contains("at most 1024 bytes"));
  ids = json::array();
  for (size_t i = 0; i < kMaxStopTokenIds; ++i) ids.push_back(i);
  CHECK_NOTHROW(parse_completion_request(json::parse(body_with("stop_token_ids", ids))));
  ids.push_back(7);
  CHECK(request_error(body_with("stop_token_ids", ids)).param() == "stop_token_ids");
  json bias = json::object();
  for (size_t i = 0; i < kMaxLogitBiasEntries; ++i) bias[std::to_string(i)] = 1;
  CHECK_NOTHROW(parse_completion_request(json::parse(body_with("logit_bias", bias))));
  bias[std::to_string(kMaxLogitBiasEntries)] = 1;
  e = request_error(body_with("logit_bias", bias));
  CHECK(e.param() == "logit_bias");
  CHECK_THAT(e.what(), Catch::Contains("at most 1024 entries"));
}

TEST_CASE("logit_bias keys with leading zeros cannot repeat a token id (issue 9, F5)",
          "[server][request][limits]") {
  // The attack: "5", "05", "005", ... all meant token 5, each adding +100.
  ApiError e = request_error(R"({"prompt": "hi", "logit_bias": {"5": 100, "05": 100}})");
  CHECK(e.status() == 400);
  CHECK(e.param() == "logit_bias");
  for (const char* key : {"05", "00", "0000000005"}) {
    INFO(key);
    CHECK(request_error(body_with("logit_bias", json{{key, 1}})).param() == "logit_bias");
  }
  // A duplicate JSON member (nlohmann keeps the last one; no double entry either way).
  const GenerateRequest dup =
      parse_completion_request(parse_json_body(R"({"prompt": "hi", "logit_bias": {"5": 100, "5": 100}})"));
  CHECK(dup.params.logit_bias.size() == 1);
  // "0" itself and ordinary ids are fine.
  const GenerateRequest ok = parse_completion_request(
      parse_json_body(R"({"prompt": "hi", "logit_bias": {"0": 1, "10": -1, "50": 2}})"));
  CHECK(ok.params.logit_bias.size() == 3);
}

TEST_CASE("the logprob entries a response may carry are bounded (issue 9, F2)",
          "[server][request][limits]") {
  // The attack: a 2000-token prompt echoed with logprobs 20 for n = 128 choices (86 MB).
  std::string ids = "[";
  for (int i = 0; i < 2000; ++i) ids += (i ? "," : "") + std::to_string(i % 200 + 1);
  ids += "]";
  const GenerateRequest attack = parse_completion_request(parse_json_body(
      R"({"prompt":)" + ids + R"(,"max_tokens":1,"n":128,"logprobs":20,"echo":true})"));
  // 128 x (2000 x 21 echoed + 1 x 21 sampled).
  CHECK(logprob_entries(attack, {2000}, {1}) == 128 * (2000 * 21 + 21));
  try {
    check_logprob_budget(attack, {2000}, {1});
    FAIL("the attack was accepted");
  } catch (const ApiError& e) {
    CHECK(e.status() == 400);
    CHECK(e.param() == "logprobs");
    CHECK_THAT(e.what(), Catch::Contains("5378688") && Catch::Contains("1000000"));
  }
  // The same prompt for one choice (42,021 entries) is fine; so is n = 23 (966,483), not 24.
  GenerateRequest one = attack;
  one.n = 1;
  CHECK(logprob_entries(one, {2000}, {1}) == 42021);
  CHECK_NOTHROW(check_logprob_budget(one, {2000}, {1}));
  one.n = 23;
  CHECK_NOTHROW(check_logprob_budget(one, {2000}, {1}));
  one.n = 24;
  CHECK_THROWS_AS(check_logprob_budget(one, {2000}, {1}), ApiError);
  // Without echo only the sampled tokens count; without logprobs nothing does.
  GenerateRequest plain = attack;
  plain.echo = false;
  CHECK(logprob_entries(plain, {2000}, {1}) == 128 * 21);
  plain.logprobs = -1;
  CHECK(logprob_entries(plain, {2000}, {100000}) == 0);
  // prompt_logprobs count the prompt (k + 1 each) beside echo; several prompts add up.
  GenerateRequest pl = parse_completion_request(parse_json_body(
      R"({"prompt":[[1,2,3],[4,5]],"max_tokens":4,"prompt_logprobs":5})"));
  CHECK(logprob_entries(pl, {3, 2}, {4, 4}) == (3 + 2) * 6);
  try {
    check_logprob_budget(pl, {200000, 2}, {4, 4});
    FAIL("accepted");
  } catch (const ApiError& e) {
    CHECK(e.param() == "prompt_logprobs");
  }
  // Chat: max_tokens x (top_logprobs + 1) per choice, and no overflow on huge inputs.
  const GenerateRequest chat = parse_chat_request(parse_json_body(
      R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20,"n":128})"));
  CHECK(logprob_entries(chat, {10}, {1000}) == 128 * 1000 * 21);
  CHECK_THROWS_AS(check_logprob_budget(chat, {10}, {1000}), ApiError);
  CHECK(logprob_entries(chat, {10}, {std::numeric_limits<int64_t>::max()}) ==
        std::numeric_limits<int64_t>::max());
}

TEST_CASE("prompt_surely_too_long: bytes beyond max_model_len x the longest token", "[server][limits]") {
  using octet::server::prompt_surely_too_long;
  // 100 tokens of at most 8 bytes cover at most 800 bytes.
  CHECK_FALSE(prompt_surely_too_long(800, 8, 100));
  CHECK(prompt_surely_too_long(801, 8, 100));
  CHECK(prompt_surely_too_long(16u << 20, 17, 512));
  // No bound known (or none possible): never refused here, the exact check decides.
  CHECK_FALSE(prompt_surely_too_long(1u << 30, 0, 100));
  CHECK_FALSE(prompt_surely_too_long(SIZE_MAX, INT64_MAX, INT64_MAX));
}

TEST_CASE("logprob budget: --max-logprobs at the vocabulary allows 64 whole-vocabulary rows",
          "[limits][logprobs]") {
  // The default (20) and anything up to 15,624 keep the fixed 1,000,000 entries.
  CHECK(logprob_entry_limit(20) == kMaxLogprobEntries);
  CHECK(logprob_entry_limit(15624) == kMaxLogprobEntries);  // 64 x 15,625 = 1,000,000
  CHECK(logprob_entry_limit(15625) == 64 * 15626);
  // SmolLM2's 49,152 tokens: vLLM's test_chat_echo.py asks prompt_logprobs -1 on a ~30-token
  // chat prompt (30 x 49,153 = 1,474,590 entries), refused at the fixed limit.
  GenerateRequest chat = parse_chat_request(parse_json_body(
      R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":49152,"max_tokens":1})"));
  CHECK_THROWS_AS(check_logprob_budget(chat, {30}, {1}), ApiError);
  CHECK_NOTHROW(check_logprob_budget(chat, {30}, {1}, logprob_entry_limit(49152)));
  CHECK_THROWS_AS(check_logprob_budget(chat, {65}, {1}, logprob_entry_limit(49152)), ApiError);
}
