#include "server/chat_render.h"

#include <stdexcept>

namespace octet::server {

// TODO(lead): call the Jinja interpreter from server/chat_template* here once that branch is
// merged. Until then chat completions answer 500 with this message.
std::string render_chat(const std::string& /*template_source*/,
                        const nlohmann::json& /*messages*/, bool /*add_generation_prompt*/,
                        const std::string& /*bos_token*/, const std::string& /*eos_token*/) {
  throw std::runtime_error("chat templates are not wired into this build yet");
}

}  // namespace octet::server
