#include "server/openai/chat_render.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string_view>

#include "server/jinja/chat_template.h"

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

bool is_reserved_chat_template_kwarg(const std::string& key) {
  static const std::set<std::string> reserved = {
      // set by octet from the request and the model
      "messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
      // apply_chat_template's options (transformers), not template variables
      "chat_template", "tokenize", "continue_final_message", "conversation", "return_dict",
      "return_assistant_tokens_mask", "padding", "truncation", "max_length", "return_tensors",
      "tokenizer_kwargs"};
  return reserved.count(key) > 0;
}

std::string render_chat(const std::string& template_source, const nlohmann::json& messages,
                        bool add_generation_prompt, const std::string& bos_token,
                        const std::string& eos_token, const nlohmann::ordered_json& tools,
                        const nlohmann::ordered_json& template_kwargs) {
  const auto t = parsed(template_source);
  // ChatTemplateError (raise_exception, or a render error caused by the messages) derives from
  // std::invalid_argument: the caller answers 400.
  // Ordered, so that the tools' tojson keeps the client's key order (as vLLM's prompt).
  nlohmann::ordered_json context{{"messages", nlohmann::ordered_json(messages)},
                                 {"add_generation_prompt", add_generation_prompt},
                                 {"bos_token", bos_token},
                                 {"eos_token", eos_token}};
  if (!tools.is_null()) context["tools"] = tools;
  if (template_kwargs.is_object()) {
    const std::set<std::string>& read = t->variable_names();
    for (auto it = template_kwargs.begin(); it != template_kwargs.end(); ++it)
      if (read.count(it.key()) && !is_reserved_chat_template_kwarg(it.key()))
        context[it.key()] = it.value();
  }
  return t->render(context);
}

namespace {

/// The marker standing for message i's content: letters and digits only, so that templates
/// pass it through unchanged (no whitespace to trim, nothing to escape).
std::string content_marker(size_t i) { return "xOCTETCONTENTx" + std::to_string(i) + "x"; }
constexpr std::string_view kMarkerPrefix = "xOCTETCONTENTx";

std::string trimmed(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

RenderedChat render_chat_with_spans(const std::string& template_source,
                                    const nlohmann::json& messages, bool add_generation_prompt,
                                    const std::string& bos_token, const std::string& eos_token,
                                    const nlohmann::ordered_json& tools,
                                    const nlohmann::ordered_json& template_kwargs) {
  RenderedChat out;
  out.text = render_chat(template_source, messages, add_generation_prompt, bos_token, eos_token,
                         tools, template_kwargs);
  nlohmann::json marked = messages;
  for (size_t i = 0; i < marked.size(); ++i)
    if (marked[i].contains("content")) marked[i]["content"] = content_marker(i);
  const std::string m = render_chat(template_source, marked, add_generation_prompt, bos_token,
                                    eos_token, tools, template_kwargs);
  const auto fail = [] {
    throw std::invalid_argument(
        "the chat template changes message contents (or branches on them), so their special "
        "tokens cannot be kept out of the prompt (--no-special-tokens-in-content)");
  };
  // The marker rendering: fixed text and markers; each marker's content (as given or trimmed)
  // must sit at its place in `text`, followed by the next fixed text.
  struct Marker {
    size_t begin, end, message;
  };
  std::vector<Marker> markers;
  for (size_t at = m.find(kMarkerPrefix); at != std::string::npos;
       at = m.find(kMarkerPrefix, at + 1)) {
    size_t p = at + kMarkerPrefix.size(), index = 0;
    const size_t digits = p;
    while (p < m.size() && m[p] >= '0' && m[p] <= '9' && p - digits < 9)
      index = index * 10 + static_cast<size_t>(m[p++] - '0');
    if (p == digits || p >= m.size() || m[p] != 'x' || index >= messages.size()) fail();
    markers.push_back({at, p + 1, index});
  }
  size_t m_pos = 0, t_pos = 0;
  const std::string& t = out.text;
  auto fixed_at = [&](size_t t_at, size_t m_begin, size_t m_end) {
    return t.compare(t_at, m_end - m_begin, m, m_begin, m_end - m_begin) == 0 &&
           t_at + (m_end - m_begin) <= t.size();
  };
  for (size_t k = 0; k < markers.size(); ++k) {
    const Marker& mk = markers[k];
    if (!fixed_at(t_pos, m_pos, mk.begin)) fail();
    t_pos += mk.begin - m_pos;
    const size_t next_end = k + 1 < markers.size() ? markers[k + 1].begin : m.size();
    const nlohmann::json& c = messages[mk.message]["content"];
    const std::string raw = c.is_string() ? c.get<std::string>() : std::string();
    bool placed = false;
    for (const std::string& cand : {raw, trimmed(raw)}) {
      if (t.compare(t_pos, cand.size(), cand) != 0 || t_pos + cand.size() > t.size()) continue;
      if (!fixed_at(t_pos + cand.size(), mk.end, next_end)) continue;
      out.content_spans.emplace_back(t_pos, t_pos + cand.size());
      t_pos += cand.size();
      placed = true;
      break;
    }
    if (!placed) fail();
    m_pos = mk.end;
  }
  if (!fixed_at(t_pos, m_pos, m.size()) || t_pos + (m.size() - m_pos) != t.size()) fail();
  return out;
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
