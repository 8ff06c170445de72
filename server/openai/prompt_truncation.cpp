#include "server/openai/prompt_truncation.h"

#include "server/openai/api_error.h"

namespace octet::server {

bool truncate_prompt(std::vector<int32_t>& ids, std::optional<int64_t> truncate_prompt_tokens,
                     bool keep_last, int64_t max_model_len, std::optional<int64_t> max_tokens) {
  if (!truncate_prompt_tokens) return false;
  const int64_t max_input = max_model_len - max_tokens.value_or(0);
  int64_t keep = *truncate_prompt_tokens;
  if (keep < 0) {
    // -1: what the context leaves; none left is the engine's context-length error.
    if (max_input <= 0) return false;
    keep = max_input;
  } else if (keep > max_input) {
    throw bad_request("truncate_prompt_tokens=" + std::to_string(keep) +
                          " cannot be greater than max_model_len - max_tokens = " +
                          std::to_string(max_input) +
                          ". Please request a smaller truncation size.",
                      "truncate_prompt_tokens");
  }
  const size_t k = static_cast<size_t>(keep);
  if (k >= ids.size()) return false;
  if (keep_last)
    ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(k));
  else
    ids.resize(k);
  return true;
}

namespace {

std::string trimmed(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

size_t continue_final_message_end(const std::string& rendered, const nlohmann::json& messages) {
  const std::string& content = messages.back()["content"].get_ref<const std::string&>();
  for (const std::string& c : {content, trimmed(content)}) {
    const size_t at = rendered.rfind(c);
    if (at != std::string::npos) return at + c.size();
  }
  throw bad_request("continue_final_message is set but the final message does not appear in "
                    "the chat after applying the chat template",
                    "messages");
}

std::string chat_echo_text(const nlohmann::json& messages, bool add_generation_prompt) {
  if (messages.empty()) return "";
  const nlohmann::json& last = messages.back();
  const std::string& role = last["role"].get_ref<const std::string&>();
  if (add_generation_prompt && role != "assistant") return "";
  return last["content"].get<std::string>();
}

}  // namespace octet::server
