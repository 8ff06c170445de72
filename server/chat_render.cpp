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

}  // namespace octet::server
