#pragma once
// The one seam between the HTTP server and the chat template interpreter
// (server/chat_template*, a Jinja2-compatible interpreter): renders an OpenAI message list
// into the prompt text the model was trained on.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace octet::server {

/// True for the keys of a request's chat_template_kwargs that octet ignores: the variables it
/// sets itself from the request and the model (messages, tools, add_generation_prompt,
/// bos_token, eos_token) and HF apply_chat_template's own options, which never reach the
/// template (chat_template, tokenize, continue_final_message, conversation, return_dict, ...;
/// vLLM lets the request's add_generation_prompt and continue_final_message win too).
bool is_reserved_chat_template_kwarg(const std::string& key);

/// Renders `template_source` (Jinja, as in tokenizer_config.json's chat_template or GGUF's
/// tokenizer.chat_template) with the variables HF's apply_chat_template passes: messages
/// ([{"role", "content" (string)}, ...]), add_generation_prompt, bos_token, eos_token, and
/// `tools` ([{"type": "function", "function": {...}}]) when not null (as HF's tools=).
/// `template_kwargs` (a request's chat_template_kwargs: an object, or null for none) adds extra
/// variables, e.g. {"enable_thinking": false}: as vLLM's resolve_chat_template_kwargs, only the
/// keys the template reads (ChatTemplate::variable_names()) are passed, and the reserved keys
/// (is_reserved_chat_template_kwarg) never replace octet's own variables.
/// Throws std::invalid_argument with a client-facing message when the template rejects the
/// conversation (raise_exception(...), e.g. roles that do not alternate), std::runtime_error for
/// a template the interpreter cannot run.
std::string render_chat(const std::string& template_source, const nlohmann::json& messages,
                        bool add_generation_prompt, const std::string& bos_token,
                        const std::string& eos_token,
                        const nlohmann::ordered_json& tools = nullptr,
                        const nlohmann::ordered_json& template_kwargs = nullptr);

/// A rendered conversation and the byte ranges of `text` that came from message contents, in
/// order ([begin, end)).
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content_spans;
};

/// render_chat(), plus where each message's content ended up in the text (for
/// --no-special-tokens-in-content: contents are tokenized without special tokens). Renders
/// twice, once as render_chat() and once with a marker in place of each content; the marker
/// rendering with each marker replaced by its content (as given, or trimmed as `| trim` does)
/// must give the first text exactly, so the spans are exact. Throws std::invalid_argument (a
/// 400) when it does not: a template that otherwise rewrites contents or branches on them.
/// Other errors as render_chat().
RenderedChat render_chat_with_spans(const std::string& template_source,
                                    const nlohmann::json& messages, bool add_generation_prompt,
                                    const std::string& bos_token, const std::string& eos_token,
                                    const nlohmann::ordered_json& tools = nullptr,
                                    const nlohmann::ordered_json& template_kwargs = nullptr);

/// Parses `chat_template` and renders a sample conversation (system, user, assistant, user;
/// with and without add_generation_prompt) under the same budgets as requests
/// (server/jinja/jinja_budget.h); call once at server start-up. A template whose own
/// raise_exception rejects the system message (some refuse the system role) is retried with
/// the sample minus the system message, which must then render. Throws std::invalid_argument
/// with a message naming the problem when the template does not parse, exceeds a budget, or
/// fails on the sample.
void check_chat_template(const std::string& chat_template, const std::string& bos_token,
                         const std::string& eos_token);

}  // namespace octet::server
