#include "server/chat_render.h"

#include <stdexcept>

namespace octet::server {

// TODO(lead): wire the Jinja interpreter (branch jinja: server/chat_template.h) after merging,
// e.g.:
//   static std::mutex mu;  static std::map<std::string, ChatTemplate> parsed;  // by source
//   ChatTemplate t;  { lock; find or ChatTemplate::parse(template_source) (a ChatTemplateError
//   of kind Syntax here is the server's fault: rethrow as std::runtime_error -> 500) }
//   return t.render(nlohmann::json{{"messages", messages},
//                                  {"add_generation_prompt", add_generation_prompt},
//                                  {"bos_token", bos_token}, {"eos_token", eos_token}});
//   (ChatTemplateError of kind Raised/Render derives from std::invalid_argument -> 400.)
// Until then chat completions answer 500 with this message.
std::string render_chat(const std::string& /*template_source*/,
                        const nlohmann::json& /*messages*/, bool /*add_generation_prompt*/,
                        const std::string& /*bos_token*/, const std::string& /*eos_token*/) {
  throw std::runtime_error("chat templates are not wired into this build yet");
}

}  // namespace octet::server
