#include "server/openai/generation_job.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "engine/request_error.h"
#include "server/openai/api_error.h"
#include "server/openai/chat_render.h"
#include "server/openai/prepare_cancel.h"
#include "server/openai/prompt_truncation.h"
#include "server/openai/request_checks.h"
#include "server/openai/tool_stream.h"

namespace octet::server {

// Response bodies keep the order their keys were built in (openai_response.h).
using json = nlohmann::ordered_json;

namespace {

Engine& engine_or_throw(ServerContext& ctx) {
  if (ctx.shutting_down.load()) throw ApiError(503, "the server is shutting down", "", "shutting_down");
  Engine* e = ctx.engine.load();
  if (!e) throw ApiError(503, "the model is still loading", "", "loading");
  return *e;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<int32_t> tokenize_chat(const ServerContext& ctx, const ModelTokenizer& tok,
                                   const nlohmann::json& messages, const std::string& text,
                                   bool add_generation_prompt, bool add_special_tokens,
                                   const nlohmann::ordered_json& tools,
                                   const nlohmann::ordered_json& template_kwargs) {
  if (ctx.config.special_tokens_in_content) return tok.tokenize(text, add_special_tokens);
  try {
    const RenderedChat r = render_chat_with_spans(ctx.chat_template, messages,
                                                  add_generation_prompt, tok.bos_token(),
                                                  tok.eos_token(), tools, template_kwargs);
    // `text` is the rendering, or its prefix under continue_final_message.
    if (text.size() > r.text.size() || r.text.compare(0, text.size(), text) != 0)
      throw std::logic_error("the chat template rendered two texts");
    std::vector<std::pair<size_t, size_t>> spans;
    for (auto [b, e] : r.content_spans)
      if (b < text.size()) spans.emplace_back(b, std::min(e, text.size()));
    return tok.tokenize_with_plain_spans(text, spans, add_special_tokens);
  } catch (const std::invalid_argument& e) {
    throw bad_request(e.what(), "messages");
  }
}

bool prompt_surely_too_long(size_t text_bytes, int64_t max_token_bytes, int64_t max_model_len) {
  if (max_token_bytes <= 0 || max_model_len <= 0) return false;
  const uint64_t bound = static_cast<uint64_t>(max_model_len);
  const uint64_t per = static_cast<uint64_t>(max_token_bytes);
  if (bound > UINT64_MAX / per) return false;  // no text is that long
  return static_cast<uint64_t>(text_bytes) > bound * per;
}

int64_t max_token_input_bytes(const ModelTokenizer& tok) {
  static std::mutex mu;
  static std::unordered_map<const ModelTokenizer*, int64_t> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(&tok);
  if (it != cache.end()) return it->second;
  int64_t longest = 0;
  for (int64_t id = 0; id < tok.vocab_size(); ++id) {
    try {
      const std::string t = tok.detokenize({static_cast<int32_t>(id)}, /*skip_special_tokens=*/false);
      longest = std::max<int64_t>(longest, static_cast<int64_t>(t.size()));
    } catch (const std::exception&) {
      // An id the tokenizer cannot decode alone covers no text by itself.
    }
  }
  // + 1: a piece's leading space may be dropped when it is decoded alone; at least 4: a
  // character without a token of its own (<unk>, up to 4 UTF-8 bytes) is one token.
  return cache.emplace(&tok, std::max<int64_t>(longest, 4) + 1).first->second;
}

void check_prompt_bytes(const ModelTokenizer& tok, const std::string& text,
                        int64_t max_model_len) {
  const int64_t per_token = max_token_input_bytes(tok);
  if (!prompt_surely_too_long(text.size(), per_token, max_model_len)) return;
  throw RequestError(RequestErrorKind::ContextLengthExceeded,
                     "This model's maximum context length is " + std::to_string(max_model_len) +
                         " tokens. However, your prompt of " + std::to_string(text.size()) +
                         " bytes is longer than that (a token covers at most " +
                         std::to_string(per_token) +
                         " bytes). Please reduce the length of the prompt.",
                     "prompt");
}

GenerationJob::GenerationJob(ServerContext& ctx, GenerateRequest request)
    : ctx_(ctx), engine_(engine_or_throw(ctx)), req_(std::move(request)) {
  const bool chat = req_.endpoint == Endpoint::kChatCompletions;
  // The engine's request errors, mapped once; a chat request's prompt is its "messages".
  try {
    prepare();
  } catch (const RequestError& e) {
    choices_.clear();  // nothing was queued
    throw to_api_error(e, chat ? "messages" : "prompt");
  }
  aborted_ = false;
  ctx_.active_jobs.fetch_add(1);
  counted_ = true;
}

void GenerationJob::prepare() {
  const bool chat = req_.endpoint == Endpoint::kChatCompletions;
  check_model_name(req_.model, ctx_.model_name);
  if (req_.priority != 0 && ctx_.config.engine.scheduler.scheduling_policy != "priority")
    throw bad_request("'priority' " + std::to_string(req_.priority) +
                          " needs the priority scheduler (start with --scheduling-policy "
                          "priority)",
                      "priority");
  // vLLM's logprobs -1 (the whole vocabulary) and --max-logprobs; every bad logit_bias id.
  resolve_logprobs(req_, engine_.vocab_size(), ctx_.config.max_logprobs);
  check_logit_bias_vocab(req_.params, engine_.vocab_size());
  // vLLM's --return-tokens-as-token-ids: every request's logprob tokens as "token_id:N".
  if (ctx_.config.return_tokens_as_token_ids) req_.return_tokens_as_token_ids = true;
  meta_.id = random_id(chat ? "chatcmpl-" : "cmpl-");
  meta_.created = unix_now();
  meta_.model = ctx_.model_name;

  // Prompts -> token ids (checked against the vocabulary by the engine).
  const ModelTokenizer& tok = engine_.tokenizer();
  if (chat && req_.tools.active())  // tool_choice vs the server's flags; its constraint
    prepare_tool_request(req_.tools, ctx_.config.enable_auto_tool_choice,
                         ctx_.config.tool_call_parser, req_.params);
  if (chat) {
    if (ctx_.chat_template.empty())
      throw bad_request("this model has no chat template; start the server with "
                        "--chat-template FILE, or use /v1/completions",
                        "messages");
    std::string text;
    check_prepare_cancelled("rendering the chat template");
    try {
      text = render_chat(ctx_.chat_template, req_.messages, req_.add_generation_prompt,
                         tok.bos_token(), tok.eos_token(), req_.tools.tools,
                         req_.chat_template_kwargs);
    } catch (const std::invalid_argument& e) {
      throw bad_request(std::string("the chat template rejected the messages") +
                            (req_.chat_template_kwargs.empty() ? "" : " (or chat_template_kwargs)") +
                            ": " + e.what(),
                        "messages");
    } catch (const std::exception& e) {
      throw ApiError(500, std::string("cannot render the chat template: ") + e.what());
    }
    if (req_.continue_final_message)
      text.resize(continue_final_message_end(text, req_.messages));
    // Truncation takes any length (vLLM skips its length check before tokenizing then).
    if (!req_.truncate_prompt_tokens) check_prompt_bytes(tok, text, engine_.max_model_len());
    check_prepare_cancelled("tokenizing the rendered messages");
    prompt_ids_.push_back(tokenize_chat(ctx_, tok, req_.messages, text, req_.add_generation_prompt,
                                        req_.add_special_tokens, req_.tools.tools,
                                        req_.chat_template_kwargs));
    prompt_texts_.push_back(text);
    if (req_.echo) chat_echo_ = chat_echo_text(req_.messages, req_.add_generation_prompt);
  } else {
    for (const PromptInput& p : req_.prompts) {
      if (p.is_token_ids) {
        prompt_ids_.push_back(p.token_ids);
        prompt_texts_.push_back("");  // echo: detokenized once the engine accepted the ids
      } else {
        if (!req_.truncate_prompt_tokens) check_prompt_bytes(tok, p.text, engine_.max_model_len());
        check_prepare_cancelled("tokenizing a prompt");
        prompt_ids_.push_back(tok.tokenize(p.text, req_.add_special_tokens));
        prompt_texts_.push_back(p.text);
      }
    }
  }

  // vLLM's truncate_prompt_tokens; echo shows the prompt that was kept.
  for (size_t p = 0; p < prompt_ids_.size(); ++p)
    if (truncate_prompt(prompt_ids_[p], req_.truncate_prompt_tokens, req_.truncate_left,
                        engine_.max_model_len(), req_.max_tokens) &&
        !chat && req_.echo && !req_.prompts[p].is_token_ids)
      prompt_texts_[p] = detokenize_known(tok, prompt_ids_[p], /*skip_special_tokens=*/false);

  // max_tokens: as requested, or up to the context limit.
  std::vector<int64_t> max_tokens;
  for (const auto& ids : prompt_ids_)
    max_tokens.push_back(resolve_max_tokens(static_cast<int64_t>(ids.size()), req_.max_tokens,
                                            engine_.max_model_len()));

  // The logprob work and output the response would carry (400), before any engine work. A
  // max_tokens beyond the context is counted as what is left (the engine refuses it next).
  {
    std::vector<int64_t> lens, capped;
    for (size_t p = 0; p < prompt_ids_.size(); ++p) {
      const int64_t n = static_cast<int64_t>(prompt_ids_[p].size());
      lens.push_back(n);
      capped.push_back(std::min(max_tokens[p], std::max<int64_t>(engine_.max_model_len() - n, 0)));
    }
    const int64_t vocab = engine_.vocab_size();
    const int64_t k = ctx_.config.max_logprobs < 0 ? vocab
                                                   : std::min(ctx_.config.max_logprobs, vocab);
    check_logprob_budget(req_, lens, capped, logprob_entry_limit(k));
  }

  // All choices at once; the queue limit (503) is checked by the engine under the lock that
  // enqueues them, so concurrent jobs cannot together pass it. The engine validates each
  // request (RequestError) before anything is queued.
  if (!engine_.stats().alive) throw ApiError(503, "the engine has stopped", "", "engine_dead");
  check_prepare_cancelled("adding the engine requests");
  std::vector<NewRequest> group;
  for (size_t p = 0; p < prompt_ids_.size(); ++p) {
    for (int64_t i = 0; i < req_.n; ++i) {
      Choice c;
      c.index = static_cast<int64_t>(p) * req_.n + i;
      c.prompt_index = p;
      c.request_id = meta_.id + "-" + std::to_string(c.index);
      if (chat && req_.tools.active())
        c.tools = std::make_shared<ChoiceTools>(
            req_.tools, tool_parser_from_name(ctx_.config.tool_call_parser));
      NewRequest nr;
      nr.request_id = c.request_id;
      nr.prompt_token_ids = prompt_ids_[p];
      nr.params = req_.params;
      nr.params.max_tokens = max_tokens[p];
      nr.params.seed = choice_seed(nr.params.seed, i);  // vLLM: child i gets seed + i
      // The prompt's logprobs are the same for every choice: computed by the first one only and
      // copied to the others (on_output), not n times.
      if (i > 0) nr.params.prompt_logprobs = -1;
      nr.priority = req_.priority;
      group.push_back(std::move(nr));
      choices_.push_back(std::move(c));
    }
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  try {
    streams = engine_.add_requests(std::move(group), ctx_.config.max_num_waiting);
  } catch (const EngineOverloaded& e) {
    choices_.clear();  // nothing was queued
    ctx_.metrics.record_admission_rejection();  // vllm:admission_rejections_total
    throw ApiError(503,
                   "the server is overloaded: " + std::to_string(e.num_waiting()) +
                       " requests are waiting (limit " + std::to_string(e.limit()) +
                       "); retry later",
                   "", "overloaded");
  } catch (const RequestError&) {
    throw;  // mapped by the constructor
  } catch (const std::invalid_argument& e) {
    choices_.clear();
    throw bad_request(e.what());
  } catch (const std::exception& e) {
    choices_.clear();
    if (ctx_.shutting_down.load()) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    if (!engine_.stats().alive) throw ApiError(503, "the engine has stopped", "", "engine_dead");
    throw ApiError(503, std::string("cannot queue the request: ") + e.what());
  }
  for (size_t k = 0; k < choices_.size(); ++k) choices_[k].stream = std::move(streams[k]);
  for (size_t p = 0; p < prompt_ids_.size(); ++p)
    ctx_.metrics.request_params_n.observe(static_cast<double>(req_.n));  // vllm:request_params_n
  if (req_.echo && !chat) {
    try {
      for (size_t p = 0; p < req_.prompts.size(); ++p)
        if (req_.prompts[p].is_token_ids)
          prompt_texts_[p] = detokenize_known(tok, prompt_ids_[p], /*skip_special_tokens=*/false);
    } catch (...) {
      abort();  // queued: end them before the job is dropped
      choices_.clear();
      throw;
    }
  }
}

GenerationJob::~GenerationJob() {
  abort();
  // The engine may hold a stream past this job (until its next flush, or its shutdown after
  // the HTTP server's): the notify callback, which holds the session's strand, goes now, on
  // this side, while the io_context still exists.
  for (Choice& c : choices_)
    if (c.stream) c.stream->set_notify(nullptr);
  if (counted_) ctx_.active_jobs.fetch_sub(1);
}

void GenerationJob::set_notify(const std::function<void()>& notify) {
  for (Choice& c : choices_) c.stream->set_notify(notify);
}

void GenerationJob::abort() {
  for (Choice& c : choices_) {
    if (c.finished) continue;
    engine_.abort(c.request_id);
    c.finished = true;
    c.finish_reason = "abort";
    ctx_.metrics.record_finish("abort");
  }
  aborted_ = true;
}

std::string GenerationJob::token_text(int32_t id) const {
  auto it = token_text_cache_.find(id);
  if (it != token_text_cache_.end()) return it->second;
  // An id of a padded vocabulary past the tokenizer's (sampled or a top alternative): "".
  std::string t = detokenize_known(engine_.tokenizer(), {id}, /*skip_special_tokens=*/false);
  token_text_cache_.emplace(id, t);
  return t;
}

TokenText GenerationJob::logprob_text() const {
  if (req_.return_tokens_as_token_ids)
    return [](int32_t id) { return "token_id:" + std::to_string(id); };
  return [this](int32_t id) { return token_text(id); };
}

void GenerationJob::add_stream_extras(json& j, const Choice& c,
                                      const std::vector<int32_t>& update_ids, bool first) const {
  if (req_.continuous_usage) {
    Usage u;
    u.prompt_tokens = static_cast<int64_t>(prompt_ids_[c.prompt_index].size());
    u.completion_tokens = static_cast<int64_t>(c.token_ids.size());
    u.details = false;  // vLLM: the counts only
    j["usage"] = usage_json(u);
  }
  if (!req_.return_token_ids) return;
  const bool chat = req_.endpoint == Endpoint::kChatCompletions;
  json& choice = j["choices"][0];
  choice["token_ids"] = update_ids;
  // vLLM: chat chunks carry prompt_token_ids at the top (the role chunk), completion chunks
  // in the choice (its first chunk).
  if (first) (chat ? j : choice)["prompt_token_ids"] = prompt_ids_[c.prompt_index];
}

void GenerationJob::fail(int status, const std::string& message, const std::string& param) {
  if (status_ == 200) {
    status_ = status;
    error_message_ = message;
    error_param_ = param;
  }
  abort();  // the other choices of a failed response are useless
}

std::string GenerationJob::on_output(Choice& c, RequestOutput& out) {
  const auto now = std::chrono::steady_clock::now();
  const bool chat = req_.endpoint == Endpoint::kChatCompletions;
  const TokenText text_of = logprob_text();
  const bool first = c.first_update;
  c.first_update = false;
  if (first) {
    const Choice& lead = choices_[c.prompt_index * static_cast<size_t>(req_.n)];
    if (&lead == &c || req_.params.prompt_logprobs < 0)
      c.prompt_logprobs = std::move(out.prompt_logprobs);
    else
      c.prompt_logprobs = lead.prompt_logprobs;  // poll() ran the lead's first update before
  }

  // Inter-token latency: the time since the previous token, shared by the tokens of an update.
  if (!out.token_ids.empty()) {
    if (first_token_time_ == std::chrono::steady_clock::time_point{}) first_token_time_ = now;
    if (c.last_token_time != std::chrono::steady_clock::time_point{}) {
      const double dt = std::chrono::duration<double>(now - c.last_token_time).count();
      const double per = dt / static_cast<double>(out.token_ids.size());
      for (size_t k = 0; k < out.token_ids.size(); ++k) ctx_.metrics.inter_token_latency.observe(per);
    }
    c.last_token_time = now;
  }

  c.text += out.text;
  c.token_ids.insert(c.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
  c.num_cached_tokens = out.num_cached_tokens;

  // Completion logprobs of this update (echoed prompt tokens first).
  json lp_update = nullptr;
  if (!chat && req_.logprobs >= 0) {
    std::vector<TokenLogprobs> echoed;
    if (first && req_.echo) {
      // The engine's prompt top-k is max(logprobs, prompt_logprobs); echo shows `logprobs`.
      echoed = c.prompt_logprobs;
      for (TokenLogprobs& e : echoed)
        if (static_cast<int64_t>(e.top.size()) > req_.logprobs)
          e.top.resize(static_cast<size_t>(req_.logprobs));
    }
    lp_update = first && req_.echo
                    ? completion_logprobs(echoed, text_of, &c.text_offset, true)
                    : completion_logprobs({}, text_of, &c.text_offset, false);
    append_completion_logprobs(lp_update,
                               completion_logprobs(out.logprobs, text_of, &c.text_offset, false));
    // Only the final body carries the accumulated logprobs: a stream sends each update's alone.
    // In place, O(update): a copy of the accumulator per update made a response quadratic.
    if (!req_.stream) append_completion_logprobs(c.completion_logprobs, std::move(lp_update));
  }
  c.logprobs.insert(c.logprobs.end(), out.logprobs.begin(), out.logprobs.end());

  if (out.finished) {
    c.finished = true;
    c.finish_reason = out.finish_reason;
    c.stop_reason = out.stop_reason;
    ctx_.metrics.record_finished_request(out);
    if (!out.error.empty() && out.invalid_request) {
      // The request's own fault found in the engine (a grammar that does not compile against
      // the tokenizer): a 400 naming the field, like the checks made before submitting.
      fail(400, out.error, out.error_param);
    } else if (!out.error.empty()) {
      spdlog::error("request {} failed in the engine: {}", c.request_id, out.error);
      fail(500, "the engine failed this request: " + out.error);
    } else if (out.finish_reason == "abort") {
      fail(ctx_.shutting_down.load() ? 503 : 500,
           ctx_.shutting_down.load() ? "the request was aborted: the server is shutting down"
                                     : "the request was aborted by the engine");
    }
  }
  if (!req_.stream || status_ != 200) return "";

  const json finish = finish_reason_json(c.finished, c.finish_reason);
  const json stop = stop_reason_json(c.stop_reason, req_.params.stop);
  if (chat && c.tools) return tool_chunks(c, out);
  if (chat) {
    const bool has_tokens = !out.token_ids.empty();
    // With return_token_ids every update with tokens makes a chunk (vLLM), text or not.
    if (out.text.empty() && !c.finished &&
        !((req_.chat_logprobs || req_.return_token_ids) && has_tokens))
      return "";
    json delta = json::object();
    if (!out.text.empty() || (req_.chat_logprobs && has_tokens)) delta["content"] = out.text;
    const json lp = req_.chat_logprobs ? chat_logprobs(out.logprobs, text_of, req_.logprobs)
                                       : json(nullptr);
    json j = chat_chunk(meta_, c.index, delta, lp, finish, stop, req_.include_usage);
    add_stream_extras(j, c, out.token_ids, /*first=*/false);  // prompt ids: the role chunk
    return sse_data(j);
  }
  std::string text = out.text;
  if (first && req_.echo) text = prompt_texts_[c.prompt_index] + text;
  const bool has_lp = req_.logprobs >= 0 && !lp_update["tokens"].empty();
  // With return_token_ids the first update (the prompt ids) and every update with tokens make
  // a chunk, text or not.
  if (text.empty() && !c.finished && !has_lp &&
      !(req_.return_token_ids && (first || !out.token_ids.empty())))
    return "";
  json j = completion_chunk(meta_, c.index, text, lp_update, finish, stop, req_.include_usage);
  add_stream_extras(j, c, out.token_ids, first);
  return sse_data(j);
}

std::string GenerationJob::tool_chunks(Choice& c, const RequestOutput& out) {
  const TokenText text_of = [this](int32_t id) { return token_text(id); };
  std::vector<json> deltas;
  for (nlohmann::json& d : c.tools->stream_deltas(c.text, c.finished)) deltas.emplace_back(std::move(d));
  const json lp = req_.chat_logprobs && !out.token_ids.empty()
                      ? chat_logprobs(out.logprobs, text_of, req_.logprobs)
                      : json(nullptr);
  // The finish reason, and logprobs with nothing else to send, need a chunk of their own.
  if (deltas.empty() && (c.finished || !lp.is_null())) deltas.push_back(json::object());
  std::string chunks;
  for (size_t k = 0; k < deltas.size(); ++k) {
    const bool last = k + 1 == deltas.size() && c.finished;
    const json finish = last ? json(c.tools->stream_finish_reason(c.finish_reason)) : json(nullptr);
    const json stop = last ? stop_reason_json(c.stop_reason, req_.params.stop) : json(nullptr);
    chunks += sse_data(chat_chunk(meta_, c.index, std::move(deltas[k]), k == 0 ? lp : json(nullptr),
                                  finish, stop, req_.include_usage));
  }
  return chunks;
}

Usage GenerationJob::usage() const {
  Usage u;
  u.details = ctx_.config.enable_prompt_tokens_details;
  for (const auto& ids : prompt_ids_) u.prompt_tokens += static_cast<int64_t>(ids.size());
  for (const Choice& c : choices_) {
    u.completion_tokens += static_cast<int64_t>(c.token_ids.size());
    if (c.index % req_.n == 0) u.cached_tokens += c.num_cached_tokens;
  }
  return u;
}

std::string GenerationJob::finish_stream() {
  std::string out;
  if (status_ != 200) {
    out += sse_data(error_json(status_, error_message_, error_param_));
  } else if (req_.include_usage) {
    const bool chat = req_.endpoint == Endpoint::kChatCompletions;
    out += sse_data(usage_chunk(meta_, chat ? "chat.completion.chunk" : "text_completion", usage()));
  }
  out += kSseDone;
  return out;
}

std::string GenerationJob::final_body() {
  if (status_ != 200) return dump(error_json(status_, error_message_, error_param_));
  const bool chat = req_.endpoint == Endpoint::kChatCompletions;
  const TokenText text_of = logprob_text();
  const TokenText decoded = [this](int32_t id) { return token_text(id); };
  const auto ids_or_null = [&](const std::vector<int32_t>& ids) {
    return req_.return_token_ids ? json(ids) : json(nullptr);
  };
  json choices = json::array();
  for (const Choice& c : choices_) {
    const json finish = finish_reason_json(true, c.finish_reason);
    const json stop = stop_reason_json(c.stop_reason, req_.params.stop);
    if (chat) {
      std::string reason = c.finish_reason;
      json message = c.tools ? json(c.tools->final_message(c.text, &reason))
                             : json{{"role", "assistant"}, {"content", c.text}};
      // vLLM's echo: the last message's content + the message content (null counts as "").
      if (req_.echo) {
        const json& content = message["content"];
        message["content"] = chat_echo_ + (content.is_string() ? content.get<std::string>() : "");
      }
      // vLLM's ChatMessage always carries "reasoning" (null without a reasoning parser); the
      // openai client exposes it as message.reasoning only when the key is sent.
      message["reasoning"] = nullptr;
      choices.push_back(json{
          {"index", c.index},
          {"message", message},
          {"logprobs", req_.chat_logprobs ? chat_logprobs(c.logprobs, text_of, req_.logprobs)
                                          : json(nullptr)},
          {"finish_reason", finish_reason_json(true, reason)},
          {"stop_reason", stop},
          {"token_ids", ids_or_null(c.token_ids)}});
    } else {
      const std::string text = (req_.echo ? prompt_texts_[c.prompt_index] : "") + c.text;
      json choice{{"index", c.index},
                  {"text", text},
                  {"logprobs", req_.logprobs >= 0 ? c.completion_logprobs : json(nullptr)},
                  {"finish_reason", finish},
                  {"stop_reason", stop},
                  {"token_ids", ids_or_null(c.token_ids)},
                  {"prompt_logprobs", nullptr},  // vLLM always sends the key
                  {"prompt_token_ids", ids_or_null(prompt_ids_[c.prompt_index])}};
      if (req_.prompt_logprobs >= 0)
        choice["prompt_logprobs"] =
            prompt_logprobs_json(c.prompt_logprobs, decoded, req_.prompt_logprobs);
      choices.push_back(std::move(choice));
    }
  }
  if (!chat) return dump(completion_response(meta_, std::move(choices), usage()));
  json body = chat_response(meta_, std::move(choices), usage());
  // vLLM: a chat response carries its prompt's logprobs and ids at the top (one prompt).
  body["prompt_logprobs"] =
      req_.prompt_logprobs >= 0 && !choices_.empty()
          ? prompt_logprobs_json(choices_[0].prompt_logprobs, decoded, req_.prompt_logprobs)
          : json(nullptr);
  body["prompt_token_ids"] = ids_or_null(prompt_ids_.empty() ? std::vector<int32_t>{}
                                                             : prompt_ids_[0]);
  return dump(body);
}

std::string GenerationJob::poll(size_t max_updates) {
  backlog_ = false;
  if (done_) return "";
  std::string out;
  const bool chat = req_.endpoint == Endpoint::kChatCompletions;
  if (!started_) {
    started_ = true;
    if (req_.stream && chat) {
      for (const Choice& c : choices_) {
        json j = chat_chunk(meta_, c.index, json{{"role", "assistant"}, {"content", ""}},
                            nullptr, nullptr, nullptr, req_.include_usage);
        add_stream_extras(j, c, {}, /*first=*/true);
        if (req_.return_token_ids) j["choices"][0].erase("token_ids");  // none generated yet
        out += sse_data(j);
      }
      // vLLM's chat echo: one chunk per choice repeating the last message's content.
      if (!chat_echo_.empty())
        for (const Choice& c : choices_) {
          json j = chat_chunk(meta_, c.index, json{{"content", chat_echo_}}, nullptr, nullptr,
                              nullptr, req_.include_usage);
          add_stream_extras(j, c, {}, /*first=*/false);
          if (req_.return_token_ids) j["choices"][0].erase("token_ids");
          out += sse_data(j);
        }
    }
  }
  bool all_finished = true;
  size_t updates = 0;
  for (Choice& c : choices_) {
    if (updates >= max_updates) {
      backlog_ = true;
      return out;
    }
    // A choice that copies its prompt logprobs from the prompt's first choice waits for that
    // choice's first update (processed earlier in this loop, or in an earlier poll).
    const Choice& lead = choices_[c.prompt_index * static_cast<size_t>(req_.n)];
    const bool wait_for_lead =
        &lead != &c && req_.params.prompt_logprobs >= 0 && c.first_update && lead.first_update;
    while (!c.finished && status_ == 200 && !wait_for_lead) {
      if (updates >= max_updates) {
        backlog_ = true;
        return out;
      }
      ++updates;
      bool timed_out = false;
      auto o = c.stream->next_for(std::chrono::milliseconds(0), &timed_out);
      if (!o) break;
      out += on_output(c, *o);
    }
    all_finished = all_finished && c.finished;
  }
  if (status_ != 200) all_finished = true;
  if (all_finished) {
    done_ = true;
    out += req_.stream ? finish_stream() : final_body();
  }
  return out;
}

}  // namespace octet::server
