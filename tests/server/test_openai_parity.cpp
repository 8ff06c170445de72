// Parity with vLLM's OpenAI server (issue 25, item 3): the vLLM request fields octet honours
// (prompt_logprobs on chat, logprobs -1 and --max-logprobs, return_token_ids,
// return_tokens_as_token_ids, truncate_prompt_tokens / truncation_side, continuous_usage_stats,
// continue_final_message, chat echo), error texts (every bad logit_bias key, integers as sent),
// the response keys vLLM always sends and the routes without /v1. Expected values are written by
// hand from vLLM's protocol.py / renderers/params.py and Hugging Face's apply_chat_template.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/openai_request.h"
#include "server/openai/openai_response.h"
#include "server/openai/prompt_truncation.h"
#include "server/openai/request_checks.h"
#include "server/openai/routes.h"

using nlohmann::json;
using namespace octet::server;

namespace {

/// The ApiError `f` throws (fails the test when none is thrown).
template <class F>
ApiError error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("no ApiError");
  return ApiError(0, "");
}

/// Parses a body as the server does (the literals of its numbers kept).
ApiError completion_text_error(const std::string& text) {
  return error_of([&] {
    NumberLiterals literals;
    const json body = parse_json_body(text, &literals);
    parse_completion_request(body, &literals);
  });
}

const json kMessages = json::array({{{"role", "user"}, {"content", "hi"}}});

json chat(json extra) {
  json b = {{"messages", kMessages}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

json completion(json extra) {
  json b = {{"prompt", "hello"}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("seed: any 64-bit integer as vLLM's, -1 no seed, one range in every error",
          "[server][parity][seed]") {
  // Negative seeds other than -1 were refused ("'seed' must be in [0, 2^63 - 1] (or -1 for
  // none)"); vLLM takes any int64.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::pair<const char*, int64_t> seeds[] = {
      {"-5", -5}, {"-2", -2}, {"-5.0", -5}, {"0", 0}, {"-9223372036854775808", kMin},
      {"9223372036854775807", kMax},
      // Integral floats beyond 2^53, as pydantic reads an int from a float.
      {"1e16", 10000000000000000}, {"4611686018427387904.0", int64_t{1} << 62},
      {"-1e18", -1000000000000000000}};
  for (const auto& [text, seed] : seeds) {
    INFO(text);
    const GenerateRequest r = parse_completion_request(
        parse_json_body(std::string(R"({"prompt": "x", "seed": )") + text + "}"));
    CHECK(r.params.seed == seed);
  }
  CHECK_FALSE(parse_completion_request(parse_json_body(R"({"prompt": "x", "seed": -1})"))
                  .params.seed);
  // Out of int64 or not an integer: one message, naming the one valid range.
  const std::pair<const char*, const char*> bad[] = {
      {"9223372036854775808", "9223372036854775808"},
      {"-9223372036854775809", "-9223372036854775809"},
      {"1e30", "1e30"}, {"1.5", "1.5"}, {R"("7")", "string"}, {"true", "boolean"},
      {"9.223372036854775808e18", "9.223372036854775808e18"}};  // 2^63 as a float
  for (const auto& [text, got] : bad) {
    INFO(text);
    const ApiError e =
        completion_text_error(std::string(R"({"prompt": "x", "seed": )") + text + "}");
    CHECK(e.status() == 400);
    CHECK(e.param() == "seed");
    CHECK(std::string(e.what()) ==
          std::string("'seed' must be an integer in [-2^63, 2^63) (-1: no seed), got ") + got);
  }
}

TEST_CASE("out-of-range integers are quoted as sent", "[server][parity]") {
  const struct {
    const char* body;
    const char* param;
    const char* shown;
  } cases[] = {
      {R"({"prompt": "x", "seed": 1e30})", "seed", "got 1e30"},
      {R"({"prompt": "x", "seed": -9223372036854775809})", "seed",
       "got -9223372036854775809"},
      {R"({"prompt": "x", "max_tokens": 1e20})", "max_tokens", "got 1e20"},
      {R"({"prompt": "x", "n": 99999999999999999999})", "n", "got 99999999999999999999"},
      {R"({"prompt": "x", "priority": 1.5E-3})", "priority", "got 1.5E-3"},
      {R"({"prompt": "x", "temperature": 1E300})", "temperature", "got 1E300"},
  };
  for (const auto& c : cases) {
    INFO(c.body);
    const ApiError e = completion_text_error(c.body);
    CHECK(e.status() == 400);
    CHECK(e.param() == c.param);
    CHECK(contains(e.what(), c.shown));
    CHECK_FALSE(contains(e.what(), "e+"));  // never the double's own spelling
  }
  // In-range integers keep their exact decimal form in range errors.
  const ApiError n = completion_text_error(R"({"prompt": "x", "n": 9223372036854775807})");
  CHECK(contains(n.what(), "got 9223372036854775807"));
  // The literals are those of the top-level members only, as written.
  NumberLiterals lit;
  parse_json_body(R"({"a": 1e30, "b": {"c": 2.5}, "d": [3.5], "e": 7})", &lit);
  CHECK(lit == NumberLiterals{{"a", "1e30"}});
}

TEST_CASE("logit_bias errors name every bad key", "[server][parity]") {
  const ApiError e = error_of([] {
    parse_completion_request(completion({{"logit_bias", {{"abc", 1}, {"5", 1}, {"-3", 2},
                                                         {"07", 1}}}}));
  });
  CHECK(e.param() == "logit_bias");
  // json objects iterate keys in sorted order: "-3", "07", "5", "abc".
  CHECK(std::string(e.what()) ==
        "'logit_bias' keys must be token ids in [0, 2147483647], got 3 that are not: \"-3\", "
        "\"07\", \"abc\"");
  // Out of the vocabulary: every id, sorted (vLLM's message).
  octet::SamplingParams p;
  p.logit_bias = {{70000, 1.0f}, {5, 1.0f}, {50000, -1.0f}};
  const ApiError v = error_of([&] { check_logit_bias_vocab(p, 49152); });
  CHECK(v.param() == "logit_bias");
  CHECK(std::string(v.what()) ==
        "token_id(s) [50000, 70000] in logit_bias contain out-of-vocab token ids. Vocabulary "
        "size: 49152");
  p.logit_bias = {{49151, 1.0f}};
  CHECK_NOTHROW(check_logit_bias_vocab(p, 49152));
}

TEST_CASE("logprobs -1 is the whole vocabulary, bounded by --max-logprobs", "[server][parity]") {
  GenerateRequest c = parse_completion_request(completion({{"logprobs", -1}}));
  CHECK(c.logprobs == kLogprobsWholeVocab);
  const ApiError big = error_of([&] { resolve_logprobs(c, 49152, 20); });
  CHECK(big.param() == "logprobs");
  CHECK(contains(big.what(), "Requested sample logprobs of 49152, which is greater than max "
                             "allowed: 20"));
  GenerateRequest tiny = parse_completion_request(completion({{"logprobs", -1}}));
  resolve_logprobs(tiny, 16, 20);  // a 16-token vocabulary fits
  CHECK(tiny.logprobs == 16);
  CHECK(tiny.params.logprobs == 16);
  // --max-logprobs -1: no cap, the whole vocabulary passes (vLLM).
  GenerateRequest all = parse_completion_request(completion({{"logprobs", -1}}));
  resolve_logprobs(all, 49152, -1);
  CHECK(all.params.logprobs == 49152);
  // An explicit count above a lowered --max-logprobs.
  GenerateRequest five = parse_chat_request(chat({{"logprobs", true}, {"top_logprobs", 5}}));
  const ApiError low = error_of([&] { resolve_logprobs(five, 49152, 3); });
  CHECK(low.param() == "top_logprobs");
  CHECK(contains(low.what(), "sample logprobs of 5, which is greater than max allowed: 3"));
  GenerateRequest pl = parse_completion_request(completion({{"prompt_logprobs", -1}}));
  CHECK(error_of([&] { resolve_logprobs(pl, 49152, 20); }).param() == "prompt_logprobs");
  // Echo with logprobs scores the prompt with the resolved count.
  GenerateRequest echo = parse_completion_request(completion({{"logprobs", -1}, {"echo", true}}));
  resolve_logprobs(echo, 8, 20);
  CHECK(echo.params.prompt_logprobs == 8);
  // Below -1: 400.
  CHECK(error_of([] { parse_chat_request(chat({{"logprobs", true}, {"top_logprobs", -2}})); })
            .param() == "top_logprobs");
  CHECK(error_of([] { parse_completion_request(completion({{"prompt_logprobs", -2}})); })
            .param() == "prompt_logprobs");
  // vLLM: top_logprobs 0 passes without logprobs, -1 and > 0 need it.
  CHECK_NOTHROW(parse_chat_request(chat({{"top_logprobs", 0}})));
  CHECK(error_of([] { parse_chat_request(chat({{"top_logprobs", -1}})); }).param() ==
        "top_logprobs");
}

TEST_CASE("chat prompt_logprobs as on completions", "[server][parity]") {
  const GenerateRequest r = parse_chat_request(chat({{"prompt_logprobs", 3}}));
  CHECK(r.prompt_logprobs == 3);
  CHECK(r.params.prompt_logprobs == 3);
  const ApiError s = error_of([] {
    parse_chat_request(chat({{"prompt_logprobs", 1}, {"stream", true}}));
  });
  CHECK(s.param() == "prompt_logprobs");
  // vLLM: 0 passes with stream (nothing is sent).
  CHECK(parse_chat_request(chat({{"prompt_logprobs", 0}, {"stream", true}})).prompt_logprobs ==
        -1);
  CHECK(error_of([] { parse_chat_request(chat({{"prompt_logprobs", int64_t{1} << 31}})); })
            .param() == "prompt_logprobs");
  // The logprob budget counts a chat prompt's logprobs too: 100,000 tokens x 21 entries.
  GenerateRequest big = parse_chat_request(chat({{"prompt_logprobs", 20}}));
  CHECK(logprob_entries(big, {100000}, {0}) == 2100000);
  CHECK(error_of([&] { check_logprob_budget(big, {100000}, {0}); }).param() == "prompt_logprobs");
}

TEST_CASE("vLLM's extra fields parse on both endpoints", "[server][parity]") {
  for (bool is_chat : {false, true}) {
    const json extra = {{"return_token_ids", true}, {"return_tokens_as_token_ids", true},
                        {"truncate_prompt_tokens", 7}, {"truncation_side", "right"},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true},
                                            {"continuous_usage_stats", true}}}};
    const GenerateRequest r =
        is_chat ? parse_chat_request(chat(extra)) : parse_completion_request(completion(extra));
    INFO(is_chat);
    CHECK(r.return_token_ids);
    CHECK(r.return_tokens_as_token_ids);
    REQUIRE(r.truncate_prompt_tokens.has_value());
    CHECK(*r.truncate_prompt_tokens == 7);
    CHECK_FALSE(r.truncate_left);
    CHECK(r.continuous_usage);
    CHECK(r.unknown_fields.empty());
  }
  const GenerateRequest d = parse_completion_request(completion({}));
  CHECK_FALSE(d.return_token_ids);
  CHECK_FALSE(d.truncate_prompt_tokens.has_value());
  CHECK(d.truncate_left);  // vLLM's default side: keep the last tokens
  // continuous_usage_stats counts only with include_usage (vLLM).
  CHECK_FALSE(parse_completion_request(completion(
                  {{"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}}))
                  .continuous_usage);
  CHECK(parse_completion_request(completion({{"truncate_prompt_tokens", -1}}))
            .truncate_prompt_tokens == -1);
  CHECK(error_of([] { parse_completion_request(completion({{"truncate_prompt_tokens", -2}})); })
            .param() == "truncate_prompt_tokens");
  CHECK(error_of([] { parse_completion_request(completion({{"truncation_side", "middle"}})); })
            .param() == "truncation_side");
  CHECK(error_of([] {
          parse_completion_request(completion(
              {{"stream", true}, {"stream_options", {{"continuous_usage_stats", 1}}}}));
        }).param() == "stream_options.continuous_usage_stats");
}

TEST_CASE("continue_final_message and chat echo", "[server][parity]") {
  // vLLM: add_generation_prompt defaults to true, and both true is a 400.
  const ApiError both = error_of([] { parse_chat_request(chat({{"continue_final_message", true}})); });
  CHECK(both.param() == "continue_final_message");
  const GenerateRequest r = parse_chat_request(
      chat({{"continue_final_message", true}, {"add_generation_prompt", false}, {"echo", true}}));
  CHECK(r.continue_final_message);
  CHECK_FALSE(r.add_generation_prompt);
  CHECK(r.echo);
  // vLLM: echo scores the prompt with top_logprobs (default 0) unless prompt_logprobs is given.
  CHECK(r.prompt_logprobs == 0);
  CHECK(parse_chat_request(chat({{"echo", true}, {"logprobs", true}, {"top_logprobs", 4}}))
            .prompt_logprobs == 4);
  CHECK(parse_chat_request(chat({{"echo", true}, {"prompt_logprobs", 2}, {"top_logprobs", 4},
                                 {"logprobs", true}}))
            .prompt_logprobs == 2);
  CHECK(parse_chat_request(chat({{"echo", true}, {"stream", true}})).prompt_logprobs == -1);
  // On /v1/completions it means nothing: 400 naming it.
  CHECK(error_of([] { parse_completion_request(completion({{"continue_final_message", true}})); })
            .param() == "continue_final_message");

  const json msgs = json::array({{{"role", "user"}, {"content", "Count: 1, 2,"}},
                                 {{"role", "assistant"}, {"content", "3, 4,"}}});
  const std::string rendered =
      "<|im_start|>user\nCount: 1, 2,<|im_end|>\n<|im_start|>assistant\n3, 4,<|im_end|>\n";
  const std::string kept = "<|im_start|>user\nCount: 1, 2,<|im_end|>\n<|im_start|>assistant\n3, 4,";
  CHECK(continue_final_message_end(rendered, msgs) == kept.size());
  // A template that trims the content: the trimmed content is found instead.
  json padded = msgs;
  padded[1]["content"] = " 3, 4, \n";
  CHECK(continue_final_message_end(rendered, padded) == kept.size());
  json absent = msgs;
  absent[1]["content"] = "5, 6";
  CHECK(error_of([&] { continue_final_message_end(rendered, absent); }).param() == "messages");

  // Echo repeats the last message when it has the reply's role.
  CHECK(chat_echo_text(msgs, /*add_generation_prompt=*/true) == "3, 4,");
  CHECK(chat_echo_text(msgs, /*add_generation_prompt=*/false) == "3, 4,");
  CHECK(chat_echo_text(kMessages, /*add_generation_prompt=*/true).empty());   // user != assistant
  CHECK(chat_echo_text(kMessages, /*add_generation_prompt=*/false) == "hi");  // its own role
}

TEST_CASE("truncate_prompt_tokens keeps vLLM's side and bounds", "[server][parity]") {
  const std::vector<int32_t> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto run = [&](std::optional<int64_t> k, bool keep_last, int64_t max_model_len,
                 std::optional<int64_t> max_tokens) {
    std::vector<int32_t> ids = ten;
    truncate_prompt(ids, k, keep_last, max_model_len, max_tokens);
    return ids;
  };
  CHECK(run(3, true, 100, 16) == std::vector<int32_t>{8, 9, 10});   // "left": the last 3
  CHECK(run(3, false, 100, 16) == std::vector<int32_t>{1, 2, 3});   // "right": the first 3
  CHECK(run(std::nullopt, true, 100, 16) == ten);
  CHECK(run(10, true, 100, 16) == ten);                             // nothing to drop
  CHECK(run(0, true, 100, 16).empty());
  // -1: max_model_len - max_tokens = 8 - 2 = 6 tokens kept.
  CHECK(run(-1, true, 8, 2) == std::vector<int32_t>{5, 6, 7, 8, 9, 10});
  CHECK(run(-1, true, 8, std::nullopt) == std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9, 10});
  // Above max_model_len - max_tokens: vLLM's 400.
  std::vector<int32_t> ids = ten;
  const ApiError e = error_of([&] { truncate_prompt(ids, 7, true, 8, 2); });
  CHECK(e.param() == "truncate_prompt_tokens");
  CHECK(std::string(e.what()) ==
        "truncate_prompt_tokens=7 cannot be greater than max_model_len - max_tokens = 6. Please "
        "request a smaller truncation size.");
  CHECK(ids == ten);
}

TEST_CASE("non-streaming bodies carry vLLM's null keys", "[server][parity]") {
  const ResponseMeta meta{"cmpl-1", 1, "m"};
  for (const auto& j : {completion_response(meta, json::array(), Usage{}),
                        chat_response(meta, json::array(), Usage{})}) {
    REQUIRE(j.contains("service_tier"));
    CHECK(j["service_tier"].is_null());
    REQUIRE(j.contains("system_fingerprint"));
    CHECK(j["system_fingerprint"].is_null());
  }
}

TEST_CASE("the OpenAI routes answer without /v1", "[server][parity]") {
  const struct {
    const char* path;
    Route route;
    const char* method;
  } cases[] = {
      {"/chat/completions", Route::kChatCompletions, "POST"},
      {"/completions", Route::kCompletions, "POST"},
      {"/models", Route::kModels, "GET"},
      {"/v1/chat/completions", Route::kChatCompletions, "POST"},
      {"/models/", Route::kModels, "GET"},
  };
  for (const auto& c : cases) {
    INFO(c.path);
    std::string method;
    CHECK(route_for(c.path, &method) == c.route);
    CHECK(method == c.method);
  }
  std::string method;
  CHECK(route_for("/embeddings", &method) == Route::kNotFound);  // octet serves no embeddings
  CHECK(route_for("/v1/tokenize", &method) == Route::kNotFound);
}


TEST_CASE("root_path (--root-path): paths under the prefix route as without it", "[server][parity]") {
  std::string method;
  CHECK(route_for("/llm/v1/chat/completions", &method, "/llm") == Route::kChatCompletions);
  CHECK(method == "POST");
  CHECK(route_for("/llm/v1/models?x=1", &method, "/llm") == Route::kModels);
  CHECK(route_for("/llm/health", &method, "/llm") == Route::kHealth);
  CHECK(route_for("/v1/models", &method, "/llm") == Route::kModels);  // unprefixed still works
  CHECK(route_for("/api/llm/v1/models", &method, "/api/llm") == Route::kModels);
  // Only a whole path segment is a prefix, and only once.
  CHECK(route_for("/llmx/v1/models", &method, "/llm") == Route::kNotFound);
  CHECK(route_for("/llm/llm/v1/models", &method, "/llm") == Route::kNotFound);
  CHECK(route_for("/llm", &method, "/llm") == Route::kNotFound);
  CHECK(route_for("/llm/v1/models", &method) == Route::kNotFound);  // no --root-path
}
