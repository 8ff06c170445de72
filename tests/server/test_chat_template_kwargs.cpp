// vLLM's chat_template_kwargs (extra chat template variables, e.g. {"enable_thinking": false} for
// Qwen3): parsed from the chat request (openai_request.h) and passed to the template by
// render_chat (chat_render.h), only the keys the template reads and never over octet's own
// variables. Expected prompts are written by hand from the templates below.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/chat_render.h"
#include "server/openai/openai_request.h"

using nlohmann::json;
using ojson = nlohmann::ordered_json;
using octet::server::ApiError;
using octet::server::GenerateRequest;
using octet::server::keep_chat_template_kwargs_order;
using octet::server::parse_chat_request;
using octet::server::parse_completion_request;
using octet::server::render_chat;
using octet::server::render_chat_with_spans;

namespace {

// Qwen3's switch in small: an empty think block when enable_thinking is false.
const std::string kThinking =
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}"
    "{% endif %}";

const json kHello = {{{"role", "user"}, {"content", "Hi"}}};

json chat_body(const json& kwargs) {
  return json{{"model", "m"}, {"messages", kHello}, {"chat_template_kwargs", kwargs}};
}

}  // namespace

TEST_CASE("chat_template_kwargs become template variables", "[server][chat][template_kwargs]") {
  CHECK(render_chat(kThinking, kHello, true, "", "") == "<|user|>Hi\n<|assistant|>");
  CHECK(render_chat(kThinking, kHello, true, "", "", nullptr, ojson{{"enable_thinking", false}}) ==
        "<|user|>Hi\n<|assistant|><think></think>");
  CHECK(render_chat(kThinking, kHello, true, "", "", nullptr, ojson{{"enable_thinking", true}}) ==
        "<|user|>Hi\n<|assistant|>");
  // Any JSON value; objects keep the client's key order in tojson.
  const std::string printing = "{{ custom | tojson }}|{{ level }}";
  CHECK(render_chat(printing, kHello, false, "", "", nullptr,
                    ojson::parse(R"({"custom": {"z": [1, 2.5, null], "a": "\u00e9"}, "level": 3})")) ==
        "{\"z\": [1, 2.5, null], \"a\": \"\u00e9\"}|3");
  // null template_kwargs and an empty object are the same as none.
  CHECK(render_chat("{{ level }}|", kHello, false, "", "", nullptr, ojson::object()) == "|");
  CHECK(render_chat("{{ level }}|", kHello, false, "", "", nullptr, ojson{{"level", 3}}) == "3|");
}

TEST_CASE("chat_template_kwargs never replace octet's own variables",
          "[server][chat][template_kwargs]") {
  const std::string t =
      "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
      "{% if add_generation_prompt %}[gen]{% endif %}{% if tools %}{{ tools | length }}{% endif %}"
      "{{ eos_token }}";
  const ojson kwargs = ojson::parse(R"({"messages": [{"role": "user", "content": "forged"}],
      "add_generation_prompt": false, "bos_token": "<B>", "eos_token": "<E>",
      "tools": [1, 2, 3]})");
  CHECK(render_chat(t, kHello, true, "<s>", "</s>", nullptr, kwargs) == "<s>Hi[gen]</s>");
  CHECK(render_chat(t, kHello, true, "<s>", "</s>", ojson::array({1}), kwargs) == "<s>Hi[gen]1</s>");
  // The content spans (--no-special-tokens-in-content) see the same rendering.
  const auto r = render_chat_with_spans(kThinking, kHello, true, "", "", nullptr,
                                        ojson{{"enable_thinking", false}});
  CHECK(r.text == "<|user|>Hi\n<|assistant|><think></think>");
  REQUIRE(r.content_spans.size() == 1);
  CHECK(r.content_spans[0] == std::pair<size_t, size_t>{8, 10});
}

TEST_CASE("chat_template_kwargs in a chat request", "[server][chat][template_kwargs]") {
  const GenerateRequest r = parse_chat_request(chat_body(
      json::parse(R"({"enable_thinking": false, "effort": "auto", "unset": null,
                      "tokenize": true, "messages": [], "n": {"deep": [1]}})")));
  // null and "auto" are unset (vLLM's merge_kwargs); reserved keys are reported as ignored.
  CHECK(r.chat_template_kwargs == ojson::parse(R"({"enable_thinking": false, "n": {"deep": [1]}})"));
  CHECK(std::count(r.unknown_fields.begin(), r.unknown_fields.end(),
                   "chat_template_kwargs.tokenize") == 1);
  CHECK(std::count(r.unknown_fields.begin(), r.unknown_fields.end(),
                   "chat_template_kwargs.messages") == 1);
  // Absent, null or {}: none.
  CHECK(parse_chat_request(chat_body(nullptr)).chat_template_kwargs.empty());
  CHECK(parse_chat_request(chat_body(json::object())).chat_template_kwargs.empty());
  // Not an object: 400 naming the field.
  for (const json& bad : {json(1), json("x"), json::array({1})}) {
    try {
      parse_chat_request(chat_body(bad));
      FAIL("no error for " << bad.dump());
    } catch (const ApiError& e) {
      CHECK(e.status() == 400);
      CHECK(e.param() == "chat_template_kwargs");
    }
  }
  // /v1/completions has no template: 400 for any kwargs.
  try {
    parse_completion_request(json{{"prompt", "p"}, {"chat_template_kwargs", {{"x", 1}}}});
    FAIL("no error");
  } catch (const ApiError& e) {
    CHECK(e.param() == "chat_template_kwargs");
  }
  CHECK_NOTHROW(parse_completion_request(json{{"prompt", "p"}, {"chat_template_kwargs", json::object()}}));
}

TEST_CASE("keep_chat_template_kwargs_order restores the client's key order",
          "[server][chat][template_kwargs]") {
  const std::string text =
      R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
          "chat_template_kwargs": {"zeta": {"y": 1, "b": 2}, "alpha": 1, "mid": null}})";
  GenerateRequest r = parse_chat_request(json::parse(text));
  CHECK(r.chat_template_kwargs.dump() == R"({"alpha":1,"zeta":{"b":2,"y":1}})");
  keep_chat_template_kwargs_order(r, text);
  CHECK(r.chat_template_kwargs.dump() == R"({"zeta":{"y":1,"b":2},"alpha":1})");
}
