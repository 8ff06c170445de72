// fuzz-layer: jinja
// libFuzzer harness: bytes -> a chat template and its context -> ChatTemplate::parse + render
// (server/jinja/chat_template.h, the Jinja interpreter in server/jinja/jinja_*). The input is
// TEMPLATE [ '\0' CONTEXT_JSON ]: without a NUL the whole input is the template, rendered with a
// fixed conversation; with one, the JSON after it is the context (an object: used as is; an
// array: the messages of the default context; anything else: the default context). Expected
// failures: ChatTemplateError (syntax, raise_exception, render errors) and
// std::invalid_argument; anything else escaping, a crash, a hang past -timeout or memory past
// -rss_limit_mb is a finding.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "server/jinja/chat_template.h"
#include "server/jinja/chat_template_error.h"

namespace {

using ojson = nlohmann::ordered_json;

ojson default_context() {
  return ojson{{"messages", ojson::array({{{"role", "system"}, {"content", "You are terse."}},
                                          {{"role", "user"}, {"content", "Hi!"}},
                                          {{"role", "assistant"}, {"content", "Hello."}},
                                          {{"role", "user"}, {"content", "Bye?"}}})},
               {"add_generation_prompt", true},
               {"bos_token", "<s>"},
               {"eos_token", "</s>"},
               {"tools", nullptr}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  ojson context = default_context();
  if (nul != std::string::npos) {
    ojson j = ojson::parse(input.begin() + nul + 1, input.end(), nullptr,
                           /*allow_exceptions=*/false);
    if (j.is_object()) context = std::move(j);
    else if (j.is_array()) context["messages"] = std::move(j);
  }
  octet::ChatTemplateOptions options;
  std::tm now{};
  now.tm_year = 124;  // 2024-05-06, pinned so that strftime_now is deterministic
  now.tm_mon = 4;
  now.tm_mday = 6;
  options.now = now;
  try {
    const octet::ChatTemplate t = octet::ChatTemplate::parse(source);
    if (context.contains("messages")) {
      context["messages"] = octet::prepare_chat_messages(context["messages"]);
    }
    const std::string out = t.render(context, options);
    volatile size_t sink = out.size();
    (void)sink;
  } catch (const octet::ChatTemplateError&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
