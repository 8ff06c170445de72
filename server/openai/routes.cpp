#include "server/openai/routes.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include <spdlog/spdlog.h>

#include "server/openai/chat_render.h"
#include "server/openai/openai_request.h"
#include "server/openai/openai_response.h"
#include "server/openai/prepare_cancel.h"
#include "server/openai/prompt_truncation.h"
#include "server/openai/structured_request.h"

#ifndef OCTET_VERSION
#define OCTET_VERSION "0.1.0"
#endif

namespace octet::server {

using nlohmann::json;

namespace {

Reply json_reply(const json& j, int status = 200) { return Reply{status, "application/json", dump(j)}; }

Engine& loaded_engine(const ServerContext& ctx) {
  Engine* e = ctx.engine.load();
  if (!e) throw ApiError(503, "the model is still loading", "", "loading");
  return *e;
}

void check_model(const ServerContext& ctx, const json& body) {
  if (!body.contains("model") || body["model"].is_null()) return;
  if (!body["model"].is_string()) throw bad_request("'model' must be a string", "model");
  try {
    check_model_name(body["model"].get<std::string>(), ctx.model_name);
  } catch (const RequestError& e) {
    throw to_api_error(e);
  }
}

}  // namespace

Reply error_reply(const ApiError& e) { return json_reply(error_json(e), e.status()); }

Route route_for(const std::string& path, std::string* method, const std::string& root_path) {
  static const struct {
    const char* path;
    const char* method;
    Route route;
  } table[] = {{"/health", "GET", Route::kHealth},
               {"/metrics", "GET", Route::kMetrics},
               {"/version", "GET", Route::kVersion},
               {"/v1/models", "GET", Route::kModels},
               {"/tokenize", "POST", Route::kTokenize},
               {"/detokenize", "POST", Route::kDetokenize},
               {"/v1/completions", "POST", Route::kCompletions},
               {"/v1/chat/completions", "POST", Route::kChatCompletions},
               // Without /v1, as llama.cpp's server also answers them.
               {"/models", "GET", Route::kModels},
               {"/completions", "POST", Route::kCompletions},
               {"/chat/completions", "POST", Route::kChatCompletions}};
  std::string p = path.substr(0, path.find('?'));
  // vLLM's --root-path (a reverse proxy's prefix): /llm/v1/models is /v1/models.
  if (!root_path.empty() && p.size() > root_path.size() &&
      p.compare(0, root_path.size(), root_path) == 0 && p[root_path.size()] == '/')
    p.erase(0, root_path.size());
  if (p.size() > 1 && p.back() == '/') p.pop_back();
  for (const auto& r : table)
    if (p == r.path) {
      *method = r.method;
      return r.route;
    }
  return Route::kNotFound;
}

bool constant_time_equals(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool authorized(const ServerContext& ctx, Route route, const std::string& authorization) {
  if (ctx.config.api_key.empty() || route == Route::kHealth || route == Route::kMetrics)
    return true;
  // RFC 7235 2.1: the auth-scheme is case-insensitive ("bearer", "BEARER"); the key is not.
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const char c = authorization[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != kScheme[i]) return false;
  }
  return constant_time_equals(authorization.substr(kScheme.size()), ctx.config.api_key);
}

Reply handle_health(const ServerContext& ctx) {
  const Engine* e = ctx.engine.load();
  if (!e) return Reply{503, "application/json", dump(error_json(503, "the model is loading"))};
  if (ctx.shutting_down.load())
    return Reply{503, "application/json", dump(error_json(503, "the server is shutting down"))};
  if (!e->stats().alive)
    return Reply{503, "application/json", dump(error_json(503, "the engine has stopped"))};
  return Reply{200, "application/json", ""};
}

Reply handle_metrics(const ServerContext& ctx) {
  const Engine* e = ctx.engine.load();
  EngineMetricsView view;
  if (e) {
    view.stats = e->stats();
    view.kv_layers = e->kv_layers();
    view.max_model_len = e->max_model_len();
    view.cache = ctx.config.engine.cache;
  }
  const std::string text = render_metrics(ctx.model_name, view, ctx.metrics);
  return Reply{200, "text/plain; version=0.0.4; charset=utf-8", text};
}

Reply handle_version() { return json_reply(json{{"version", OCTET_VERSION}}); }

Reply handle_models(const ServerContext& ctx) {
  const Engine* e = ctx.engine.load();
  json model{{"id", ctx.model_name},
             {"object", "model"},
             {"created", ctx.created},
             {"owned_by", "octet"},
             {"root", ctx.config.engine.model},
             {"parent", nullptr}};
  if (e) model["max_model_len"] = e->max_model_len();
  return json_reply(json{{"object", "list"}, {"data", json::array({model})}});
}

Reply handle_tokenize(ServerContext& ctx, const std::string& text) {
  const json body = parse_json_body(text);
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  check_model(ctx, body);
  Engine& engine = loaded_engine(ctx);
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    json chat_body = body;
    chat_body.erase("add_special_tokens");
    chat_body.erase("return_token_strs");
    GenerateRequest r = parse_chat_request(chat_body);
    keep_key_order(r, text);
    keep_chat_template_kwargs_order(r, text);
    if (ctx.chat_template.empty())
      throw bad_request("this model has no chat template", "messages");
    std::string prompt;
    check_prepare_cancelled("rendering the chat template");
    try {
      prompt = render_chat(ctx.chat_template, r.messages, r.add_generation_prompt,
                           engine.tokenizer().bos_token(), engine.tokenizer().eos_token(),
                           r.tools.tools, r.chat_template_kwargs);
      if (r.continue_final_message)  // vLLM's /tokenize takes it too
        prompt.resize(continue_final_message_end(prompt, r.messages));
    } catch (const std::invalid_argument& e) {
      throw bad_request(std::string("the chat template rejected the messages") +
                            (r.chat_template_kwargs.empty() ? "" : " (or chat_template_kwargs)") +
                            ": " + e.what(),
                        "messages");
    } catch (const std::exception& e) {
      throw ApiError(500, std::string("cannot render the chat template: ") + e.what());
    }
    bool add_special = false;
    if (body.contains("add_special_tokens") && body["add_special_tokens"].is_boolean())
      add_special = body["add_special_tokens"];
    check_prompt_bytes(engine.tokenizer(), prompt, engine.max_model_len());
    check_prepare_cancelled("tokenizing the rendered messages");
    ids = tokenize_chat(ctx, engine.tokenizer(), r.messages, prompt, r.add_generation_prompt,
                        add_special, r.tools.tools, r.chat_template_kwargs);
  } else {
    if (!body.contains("prompt"))
      throw bad_request("/tokenize needs 'prompt' (a string) or 'messages' (a chat)", "prompt");
    if (!body["prompt"].is_string()) throw bad_request("'prompt' must be a string", "prompt");
    bool add_special = true;
    if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_null()) {
      if (!body["add_special_tokens"].is_boolean())
        throw bad_request("'add_special_tokens' must be a boolean", "add_special_tokens");
      add_special = body["add_special_tokens"];
    }
    // The prompts' byte bound (a text certain to exceed the context is not tokenized).
    const std::string& prompt = body["prompt"].get_ref<const std::string&>();
    check_prompt_bytes(engine.tokenizer(), prompt, engine.max_model_len());
    check_prepare_cancelled("tokenizing the prompt");
    ids = engine.tokenizer().tokenize(prompt, add_special);
  }
  // vLLM's return_token_strs: each token's vocabulary string (convert_ids_to_tokens: the raw
  // piece, e.g. "Ġhello"); "" for ids of a padded vocabulary past the tokenizer's.
  json token_strs = nullptr;
  if (body.contains("return_token_strs") && !body["return_token_strs"].is_null()) {
    if (!body["return_token_strs"].is_boolean())
      throw bad_request("'return_token_strs' must be a boolean", "return_token_strs");
    if (body["return_token_strs"].get<bool>()) {
      token_strs = json::array();
      for (int32_t id : ids)
        token_strs.push_back(id < engine.tokenizer().vocab_size() ? engine.tokenizer().token_text(id)
                                                                   : std::string());
    }
  }
  return json_reply(json{{"count", ids.size()},
                         {"max_model_len", engine.max_model_len()},
                         {"tokens", ids},
                         {"token_strs", token_strs}});
}

Reply handle_detokenize(ServerContext& ctx, const std::string& text) {
  const json body = parse_json_body(text);
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  check_model(ctx, body);
  Engine& engine = loaded_engine(ctx);
  if (!body.contains("tokens") || !body["tokens"].is_array())
    throw bad_request("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  const ModelTokenizer& tok = engine.tokenizer();
  // Ids of the model's vocabulary; those of a padded vocabulary past the tokenizer's decode to
  // "" (vLLM).
  const int64_t vocab = engine.vocab_size();
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      throw bad_request("'tokens' must hold token ids in [0, " + std::to_string(vocab) +
                            "), got " + describe_json(t),
                        "tokens");
    ids.push_back(t.get<int32_t>());
  }
  try {
    return json_reply(json{{"prompt", detokenize_known(tok, ids, /*skip_special_tokens=*/false)}});
  } catch (const RequestError& e) {
    throw to_api_error(e);
  }
}

std::unique_ptr<GenerationJob> start_generation(ServerContext& ctx, Endpoint endpoint,
                                                const std::string& text) {
  NumberLiterals literals;
  const json body = parse_json_body(text, &literals);
  GenerateRequest r = endpoint == Endpoint::kChatCompletions
                          ? parse_chat_request(body, &literals)
                          : parse_completion_request(body, &literals);
  keep_key_order(r, text);  // schemas and tools in the client's key order
  keep_chat_template_kwargs_order(r, text);
  if (!r.unknown_fields.empty())
    spdlog::warn("ignoring unknown request fields: {}", field_names_for_log(r.unknown_fields));
  return std::make_unique<GenerationJob>(ctx, std::move(r));
}

}  // namespace octet::server
