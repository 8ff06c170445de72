#pragma once
// The endpoints that answer at once (no engine request): /health, /metrics, /version,
// /v1/models, /tokenize, /detokenize, and the start of the two generation endpoints. Pure
// request -> reply functions over the ServerContext; the HTTP session (http_routing.cpp) owns
// sockets and streaming.
#include <memory>
#include <string>

#include "server/openai/api_error.h"
#include "server/openai/generation_job.h"
#include "server/openai/server_context.h"

namespace octet::server {

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

/// The error reply for an ApiError (OpenAI's error JSON).
Reply error_reply(const ApiError& e);

/// What a request path names, after the query string is cut off.
enum class Route {
  kHealth, kMetrics, kVersion, kModels, kTokenize, kDetokenize, kCompletions,
  kChatCompletions, kNotFound
};
/// Route for a path; `allowed_method` is set to "GET" or "POST" for known paths. The OpenAI
/// routes also answer without /v1 (/completions, /chat/completions, /models), as llama.cpp's.
/// A path under `root_path` (--root-path, e.g. "/llm") is routed with that prefix removed.
Route route_for(const std::string& path, std::string* allowed_method,
                const std::string& root_path = "");

/// True when the two strings are equal, in time that depends only on their lengths (for
/// secrets: no early exit at the first differing byte).
bool constant_time_equals(const std::string& a, const std::string& b);

/// True when `authorization` (the Authorization header, "" if absent) grants access to
/// `route`: always when no --api-key is configured and for /health and /metrics (probes and
/// scrapers), else when it equals "Bearer <api_key>" (compared in constant time). Checked
/// before routing errors, so unknown paths and wrong methods also need the key.
bool authorized(const ServerContext& ctx, Route route, const std::string& authorization);

/// GET /health: 200 "" once loaded and the engine is alive; 503 while loading, when shutting
/// down and after the engine died.
Reply handle_health(const ServerContext& ctx);
/// GET /metrics: Prometheus text (see metrics.h); engine gauges are absent while loading.
Reply handle_metrics(const ServerContext& ctx);
/// GET /version: {"version": "<octet version>"}.
Reply handle_version();
/// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created",
/// "owned_by": "octet", "root", "max_model_len"}]}.
Reply handle_models(const ServerContext& ctx);
/// POST /tokenize (vLLM): {"prompt": str, "add_special_tokens": bool = true} or {"messages",
/// "add_generation_prompt": bool = true, "continue_final_message": bool = false} -> {"count",
/// "max_model_len", "tokens", "token_strs" (each token decoded alone with "return_token_strs":
/// true, else null)}. A text
/// certain to exceed the context (check_prompt_bytes, the prompts' byte bound) is refused
/// untokenized: RequestError ContextLengthExceeded (400). Between its steps it checks the
/// preparation's cancellation (prepare_cancel.h: ApiError 499 once the client left).
Reply handle_tokenize(ServerContext& ctx, const std::string& body);
/// POST /detokenize (vLLM): {"tokens": [ids in [0, vocab_size)]} -> {"prompt": str}; ids of a
/// padded vocabulary past the tokenizer's are "" (vLLM).
Reply handle_detokenize(ServerContext& ctx, const std::string& body);

/// Parses and validates a generation body and starts its job (engine requests added). Logs
/// one warning naming the unknown fields, if any. Throws ApiError.
std::unique_ptr<GenerationJob> start_generation(ServerContext& ctx, Endpoint endpoint,
                                                const std::string& body);

}  // namespace octet::server
