// ChatTemplate (server/chat_template.h): real chat templates rendered byte-exact against
// transformers' apply_chat_template (tests/server/golden/chat_templates.json, made by
// scripts/make_chat_template_golden.py), and unit tests of the Jinja language whose expected
// values are written by hand from jinja2 3.1's documented behaviour (each checked with jinja2).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "server/chat_template.h"

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
  throw;  // unreachable
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
