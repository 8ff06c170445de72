#pragma once
// GenerationJob: one /v1/completions or /v1/chat/completions request from validated fields to
// the response bytes. It renders and tokenizes the prompts, resolves max_tokens against the
// context limit, adds prompts x n engine requests (seed + i for choice i when a seed is given,
// as vLLM's ParentRequest does), then turns their RequestStream updates into SSE chunks or one
// JSON body. It never blocks: the HTTP connection calls poll() whenever a stream notifies.
// Not thread-safe: one connection (strand) owns it.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/openai/openai_request.h"
#include "server/openai/openai_response.h"
#include "server/openai/server_context.h"

namespace octet::server {

class ChoiceTools;  // server/openai/tool_stream.h

/// Whether a prompt of `text_bytes` bytes is certain to exceed `max_model_len` tokens without
/// tokenizing it, given that no token covers more than `max_token_bytes` bytes of input text:
/// text_bytes > max_model_len * max_token_bytes (saturating). A cheap bound, not the exact
/// check (the engine's comes after tokenizing): it only spares tokenizing a text far too long.
bool prompt_surely_too_long(size_t text_bytes, int64_t max_token_bytes, int64_t max_model_len);

/// An upper bound on the input bytes one token of `tok` can cover: the longest single-token
/// detokenized text (at least 4, one UTF-8 character mapped to <unk>) plus one (a SentencePiece
/// piece's leading "▁" may be dropped when it is decoded alone; byte-fallback pieces decode to
/// at least the byte they match). The supported
/// normalizers (Prepend, Replace(" ", "▁")) only lengthen the text, so a token never covers
/// more input than this. Computed once per tokenizer (one detokenize per vocabulary entry) and
/// cached; thread-safe.
int64_t max_token_input_bytes(const ModelTokenizer& tok);

/// Throws RequestError (ContextLengthExceeded, param "prompt") when `text` is certain to
/// tokenize to more than max_model_len tokens (prompt_surely_too_long), before tokenizing it: a
/// 16 MB prompt cost ~26 s of a preparation thread only to be refused. The one byte bound of
/// prompts, /tokenize included; the message names the limit.
void check_prompt_bytes(const ModelTokenizer& tok, const std::string& text, int64_t max_model_len);

/// The token ids of a rendered chat prompt `text` (render_chat of `messages`, `tools` and
/// `template_kwargs`): tok.tokenize() as vLLM does, or, with --no-special-tokens-in-content,
/// with the message contents taken as plain text (render_chat_with_spans,
/// ModelTokenizer::tokenize_with_plain_spans; text the template writes from template_kwargs is
/// not a message content and keeps its special tokens). Throws ApiError 400 (param "messages")
/// when the contents cannot be isolated.
std::vector<int32_t> tokenize_chat(const ServerContext& ctx, const ModelTokenizer& tok,
                                   const nlohmann::json& messages, const std::string& text,
                                   bool add_generation_prompt, bool add_special_tokens,
                                   const nlohmann::ordered_json& tools = nullptr,
                                   const nlohmann::ordered_json& template_kwargs = nullptr);

class GenerationJob {
 public:
  /// Prepares the prompts and adds the engine requests. Throws ApiError: 400 for a prompt that
  /// does not fit the context (the message gives the limit and the requested count), an empty
  /// prompt, a token id outside the vocabulary or a template that rejects the messages; 404 for
  /// an unknown model; 503 when the server is loading or shutting down or the waiting queue is
  /// full; 499 when the preparation was cancelled (its client left: prepare_cancel.h, checked
  /// before rendering, before each tokenization and before the engine requests); 500 for
  /// internal faults.
  GenerationJob(ServerContext& ctx, GenerateRequest request);
  /// Aborts every engine request that has not finished.
  ~GenerationJob();
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  /// Sets the callback every stream calls (on the engine thread) after each update. It must
  /// only post work elsewhere. Pending updates are replayed at once.
  void set_notify(const std::function<void()>& notify);

  bool stream() const { return req_.stream; }

  /// Drains the updates available now, at most `max_updates` of them (engine outputs, over all
  /// choices); backlog() tells whether it stopped at that bound with more possibly waiting (the
  /// caller polls again later, so that one response cannot hold its thread for long).
  /// Streaming: the SSE bytes to send next (the role chunks on the first call, content chunks,
  /// the usage chunk and "data: [DONE]" at the end). Non-streaming: "" until done(), then the
  /// whole JSON body.
  std::string poll(size_t max_updates = SIZE_MAX);
  /// The last poll() stopped at its max_updates bound (more updates may be waiting).
  bool backlog() const { return backlog_; }
  bool done() const { return done_; }
  /// HTTP status of a non-streaming response (200, or the error's status).
  int status() const { return status_; }

  /// The client went away: aborts every unfinished engine request at once.
  void abort();

  /// Token counts so far (the response's "usage").
  Usage usage() const;
  /// When poll() first received a generated token (time_point{} = none yet): the access log's
  /// time to first token.
  std::chrono::steady_clock::time_point first_token_time() const { return first_token_time_; }
  /// The response's "id" (cmpl-... / chatcmpl-...); engine request ids are "<id>-<choice>".
  const std::string& response_id() const { return meta_.id; }

 private:
  struct Choice {
    int64_t index = 0;            // prompt_index * n + i
    size_t prompt_index = 0;
    std::string request_id;
    std::shared_ptr<RequestStream> stream;
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<TokenLogprobs> logprobs;
    std::vector<TokenLogprobs> prompt_logprobs;
    nlohmann::ordered_json completion_logprobs;  // legacy format, accumulated (completions)
    int64_t text_offset = 0;
    bool first_update = true;
    bool finished = false;
    std::string finish_reason, stop_reason;
    int64_t num_cached_tokens = 0;
    std::chrono::steady_clock::time_point last_token_time{};
    std::shared_ptr<ChoiceTools> tools;  // chat with tool_choice other than "none"
  };

  /// The constructor's work: prompts, max_tokens, the engine requests (throws RequestError
  /// unmapped, ApiError).
  void prepare();
  /// Streaming chunks for one update of choice c (may be empty).
  std::string on_output(Choice& c, RequestOutput& out);
  /// Streaming chunks of a chat choice with tools (tool_stream.h) for update `out`.
  std::string tool_chunks(Choice& c, const RequestOutput& out);
  void fail(int status, const std::string& message, const std::string& param = "");
  std::string finish_stream();
  std::string final_body();
  std::string token_text(int32_t id) const;
  /// The token strings of logprobs: token_text, or "token_id:N" (return_tokens_as_token_ids).
  TokenText logprob_text() const;
  /// vLLM's per-chunk extras of a stream chunk `j` of choice c: usage so far
  /// (continuous_usage_stats), token_ids of this update and prompt_token_ids on the choice's
  /// first chunk (return_token_ids).
  void add_stream_extras(nlohmann::ordered_json& j, const Choice& c,
                         const std::vector<int32_t>& update_ids, bool first) const;

  ServerContext& ctx_;
  Engine& engine_;
  GenerateRequest req_;
  ResponseMeta meta_;
  std::vector<std::vector<int32_t>> prompt_ids_;  // per prompt
  std::vector<std::string> prompt_texts_;         // per prompt (echo)
  std::string chat_echo_;                         // chat echo: the text repeated before output
  std::vector<Choice> choices_;
  bool started_ = false;   // role chunks sent
  bool backlog_ = false;   // the last poll() stopped at its bound
  bool done_ = false;
  bool aborted_ = false;
  int status_ = 200;
  std::string error_message_;
  std::string error_param_;  // the request field a 400 names ("" when none)
  bool counted_ = false;   // counted in ctx_.active_jobs
  std::chrono::steady_clock::time_point first_token_time_{};
  mutable std::unordered_map<int32_t, std::string> token_text_cache_;
};

}  // namespace octet::server
