#include "server/openai/openai_response.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <random>
#include <unordered_map>

namespace octet::server {

using json = nlohmann::ordered_json;

namespace {

/// Unicode code points in UTF-8 text (Python's len(), which OpenAI's text_offset counts).
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

/// A float logprob as the double whose shortest decimal form is the float's own (-0.1f
/// prints as -0.1, not -0.10000000149011612).
double as_json_number(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, v);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json base(const ResponseMeta& meta, const char* object) {
  return json{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

json usage_json(const Usage& u) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  if (u.details) j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

std::string random_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 2; ++i) {
    uint64_t v = rng();
    for (int j = 0; j < 16; ++j, v >>= 4) id += hex[v & 15];
  }
  return id;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_data(const json& j) { return "data: " + dump(j) + "\n\n"; }
std::string sse_data(const nlohmann::json& j) { return "data: " + dump(j) + "\n\n"; }

namespace {

/// obj[key] = value for an ordered_json object, as a Python dict assigns: a new key goes last,
/// an existing one keeps its place. O(1) with `index` (key -> position); ordered_json's own
/// operator[] searches linearly, which made whole-vocabulary logprobs quadratic per token.
void dict_set(json& obj, std::unordered_map<std::string, size_t>& index, std::string key,
              json value) {
  auto& items = obj.get_ref<json::object_t&>();
  const auto [it, fresh] = index.try_emplace(key, items.size());
  if (fresh)
    items.emplace_back(std::move(key), std::move(value));
  else
    (items.begin() + static_cast<std::ptrdiff_t>(it->second))->second = std::move(value);
}

}  // namespace

json completion_logprobs(const std::vector<TokenLogprobs>& entries, const TokenText& text,
                         int64_t* text_offset, bool first_has_no_logprob) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (size_t i = 0; i < entries.size(); ++i) {
    const TokenLogprobs& e = entries[i];
    const std::string tok = text(e.token_id);
    tokens.push_back(tok);
    offsets.push_back(*text_offset);
    *text_offset += code_points(tok);
    if (i == 0 && first_has_no_logprob) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(as_json_number(e.logprob));
    json alts = json::object();  // ordered: the chosen token first (vLLM)
    std::unordered_map<std::string, size_t> index;
    dict_set(alts, index, tok, as_json_number(e.logprob));
    for (const auto& [id, lp] : e.top) dict_set(alts, index, text(id), as_json_number(lp));
    top.push_back(std::move(alts));
  }
  return json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top},
              {"text_offset", offsets}};
}

json prompt_logprobs_json(const std::vector<TokenLogprobs>& entries, const TokenText& text,
                          int64_t top_k) {
  json out = json::array();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i == 0) {
      out.push_back(nullptr);
      continue;
    }
    const TokenLogprobs& e = entries[i];
    json m = json::object();  // ordered: the prompt token first (vLLM)
    std::unordered_map<std::string, size_t> index;
    dict_set(m, index, std::to_string(e.token_id),
             {{"logprob", as_json_number(e.logprob)},
              {"rank", e.rank},
              {"decoded_token", text(e.token_id)}});
    const int64_t k = std::min<int64_t>(top_k, static_cast<int64_t>(e.top.size()));
    for (int64_t r = 0; r < k; ++r) {
      const auto& [id, lp] = e.top[static_cast<size_t>(r)];
      dict_set(m, index, std::to_string(id),
               {{"logprob", as_json_number(lp)}, {"rank", r + 1}, {"decoded_token", text(id)}});
    }
    out.push_back(std::move(m));
  }
  return out;
}

void append_completion_logprobs(json& acc, json b) {
  if (acc.is_null()) {
    acc = std::move(b);
    return;
  }
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    json& dst = acc[key];
    for (auto& v : b[key]) dst.push_back(std::move(v));
  }
}

json chat_logprobs(const std::vector<TokenLogprobs>& entries, const TokenText& text,
                   int64_t top_k) {
  json content = json::array();
  for (const TokenLogprobs& e : entries) {
    const std::string tok = text(e.token_id);
    // vLLM: the first top_k entries of {sampled token, top entries by rank} (by token id).
    std::vector<std::pair<int32_t, float>> ranked{{e.token_id, e.logprob}};
    for (const auto& t : e.top)
      if (t.first != e.token_id) ranked.push_back(t);
    json alts = json::array();
    for (size_t k = 0; k < ranked.size() && static_cast<int64_t>(k) < top_k; ++k) {
      const std::string t = text(ranked[k].first);
      alts.push_back(json{{"token", t}, {"logprob", as_json_number(ranked[k].second)},
                          {"bytes", bytes_of(t)}});
    }
    content.push_back(json{{"token", tok},
                           {"logprob", as_json_number(e.logprob)},
                           {"bytes", bytes_of(tok)},
                           {"top_logprobs", alts}});
  }
  return json{{"content", content}, {"refusal", nullptr}};
}

json finish_reason_json(bool finished, const std::string& reason) {
  if (!finished) return nullptr;
  return reason;
}

json stop_reason_json(const std::string& stop_reason, const std::vector<std::string>& stop) {
  if (stop_reason.empty()) return nullptr;
  for (const auto& s : stop)
    if (s == stop_reason) return stop_reason;
  bool digits = true;
  for (char c : stop_reason) digits = digits && c >= '0' && c <= '9';
  if (digits && stop_reason.size() < 10) return std::stoll(stop_reason);
  return stop_reason;
}

json completion_chunk(const ResponseMeta& meta, int64_t index, const std::string& text,
                      json logprobs, json finish_reason, json stop_reason, bool include_usage) {
  json j = base(meta, "text_completion");
  j["choices"] = json::array({json{{"index", index},
                                   {"text", text},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", std::move(finish_reason)},
                                   {"stop_reason", std::move(stop_reason)}}});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

json chat_chunk(const ResponseMeta& meta, int64_t index, json delta, json logprobs,
                json finish_reason, json stop_reason, bool include_usage) {
  json j = base(meta, "chat.completion.chunk");
  j["choices"] = json::array({json{{"index", index},
                                   {"delta", std::move(delta)},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", std::move(finish_reason)},
                                   {"stop_reason", std::move(stop_reason)}}});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

json usage_chunk(const ResponseMeta& meta, const std::string& object, const Usage& usage) {
  json j = base(meta, object.c_str());
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

json completion_response(const ResponseMeta& meta, json choices, const Usage& usage) {
  json j = base(meta, "text_completion");
  j["choices"] = std::move(choices);
  j["service_tier"] = nullptr;        // vLLM sends both keys, null
  j["system_fingerprint"] = nullptr;
  j["usage"] = usage_json(usage);
  return j;
}

json chat_response(const ResponseMeta& meta, json choices, const Usage& usage) {
  json j = base(meta, "chat.completion");
  j["choices"] = std::move(choices);
  j["service_tier"] = nullptr;        // vLLM sends both keys, null
  j["system_fingerprint"] = nullptr;
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace octet::server
