#include "server/chat_render.h"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "server/chat_template.h"

namespace octet::server {

namespace {

/// The parsed template for a source, parsed once (a server renders one or two templates).
/// A template that does not parse is the server's fault, not the request's: runtime_error.
std::shared_ptr<const ChatTemplate> parsed(const std::string& source) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const ChatTemplate>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(source);
  if (it != cache.end()) return it->second;
  std::shared_ptr<const ChatTemplate> t;
  try {
    t = std::make_shared<const ChatTemplate>(ChatTemplate::parse(source));
  } catch (const ChatTemplateError& e) {
    throw std::runtime_error(std::string("the chat template does not parse: ") + e.what());
  }
  cache.emplace(source, t);
  return t;
}

}  // namespace

std::string render_chat(const std::string& template_source, const nlohmann::json& messages,
                        bool add_generation_prompt, const std::string& bos_token,
                        const std::string& eos_token) {
  const auto t = parsed(template_source);
  // ChatTemplateError (raise_exception, or a render error caused by the messages) derives from
  // std::invalid_argument: the caller answers 400.
  return t->render(nlohmann::json{{"messages", messages},
                                  {"add_generation_prompt", add_generation_prompt},
                                  {"bos_token", bos_token},
                                  {"eos_token", eos_token}});
}

namespace {

nlohmann::json sample_messages(bool with_system) {
  nlohmann::json messages = nlohmann::json::array();
  if (with_system) messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  messages.push_back({{"role", "user"}, {"content", "Hello! What is 2 + 2?"}});
  messages.push_back({{"role", "assistant"}, {"content", "2 + 2 is 4."}});
  messages.push_back({{"role", "user"}, {"content", "And 3 + 3?"}});
  return messages;
}

// Renders the sample with and without add_generation_prompt; the template's errors propagate.
void render_sample(const ChatTemplate& t, bool with_system, const std::string& bos_token,
                   const std::string& eos_token) {
  for (bool add_generation_prompt : {false, true})
    t.render(nlohmann::json{{"messages", sample_messages(with_system)},
                            {"add_generation_prompt", add_generation_prompt},
                            {"bos_token", bos_token},
                            {"eos_token", eos_token}});
}

}  // namespace

void check_chat_template(const std::string& chat_template, const std::string& bos_token,
                         const std::string& eos_token) {
  ChatTemplate t;
  try {
    t = ChatTemplate::parse(chat_template);
  } catch (const ChatTemplateError& e) {
    throw std::invalid_argument(std::string("the chat template does not parse: ") + e.what());
  }
  try {
    try {
      render_sample(t, true, bos_token, eos_token);
    } catch (const ChatTemplateError& e) {
      if (e.kind() != ChatTemplateError::Kind::Raised) throw;
      render_sample(t, false, bos_token, eos_token);  // the template refuses system messages
    }
  } catch (const ChatTemplateError& e) {
    const char* what = e.kind() == ChatTemplateError::Kind::Limit ? "exceeds a budget" : "fails";
    throw std::invalid_argument(std::string("the chat template ") + what +
                                " on a sample conversation (system, user, assistant, user): " + e.what());
  }
}

}  // namespace octet::server
