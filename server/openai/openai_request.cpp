#include "server/openai/openai_request.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "config/file_read.h"
#include "server/openai/api_error.h"
#include "server/openai/chat_render.h"
#include "server/openai/json_literals.h"
#include "server/openai/request_fields.h"
#include "server/openai/structured_request.h"

namespace octet::server {

namespace {

using nlohmann::json;

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void unsupported(const std::string& key, const std::string& why = "") {
  throw bad_request("'" + key + "' is not supported by octet" + (why.empty() ? "" : ": " + why),
                    key);
}

/// Fields octet recognises but cannot honour: any value other than null / the listed
/// harmless ones gets 400 naming the field.
void reject_unsupported(Fields& f, Endpoint endpoint) {
  // Tools: chat only (tool_request.h); structured outputs: both (structured_request.h).
  if (endpoint == Endpoint::kCompletions) {
    if (const json* v = f.get("tools"); v && !(v->is_array() && v->empty()))
      unsupported("tools", "tool calling is supported on /v1/chat/completions only");
    if (const json* v = f.get("tool_choice"); v && !(v->is_string() && *v == "none"))
      unsupported("tool_choice", "tool calling is supported on /v1/chat/completions only");
    f.get("parallel_tool_calls");  // meaningless without tools: accepted
  }
  if (const json* v = f.get("functions"); v && !(v->is_array() && v->empty()))
    unsupported("functions", "use 'tools' (the deprecated 'functions' is not implemented)");
  if (const json* v = f.get("function_call"); v && !(v->is_string() && *v == "none"))
    unsupported("function_call", "use 'tool_choice'");
  for (const std::string& key : structured_output_fields()) f.present(key.c_str());
  for (const char* key : {"audio", "prediction", "web_search_options", "logits_processors",
                          "chat_template", "documents", "reasoning_effort"}) {
    if (f.get(key)) unsupported(key);
  }
  if (const json* v = f.get("modalities")) {
    if (!(v->is_array() && v->size() == 1 && (*v)[0] == "text"))
      unsupported("modalities", "only [\"text\"] output is supported");
  }
  if (endpoint == Endpoint::kCompletions) {
    if (const json* v = f.get("continue_final_message"); v && *v != false)
      unsupported("continue_final_message", "it applies to /v1/chat/completions only");
    if (const json* v = f.get("chat_template_kwargs"); v && !(v->is_object() && v->empty()))
      unsupported("chat_template_kwargs", "it applies to /v1/chat/completions only");
  }
  if (const json* v = f.get("store"); v && *v != false)
    unsupported("store", "octet stores no completions");
  f.get("metadata");      // only meaningful with store: accepted
  f.get("service_tier");  // one tier: accepted
  if (endpoint == Endpoint::kCompletions) {
    if (auto suffix = f.string("suffix"); suffix && !suffix->empty())
      unsupported("suffix", "insertion (fill-in-the-middle) is not implemented");
  }
}

/// A field that changes what is generated, which octet does not implement: a value other than
/// the neutral ones (null and those that request nothing) gets 400 naming it, so that a client
/// never receives output that silently ignored its request.
struct Unimplemented {
  const char* key;
  bool (*neutral)(const json& v);  // the value requests nothing (null is always neutral)
  const char* why;
};

bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_empty_list(const json& v) { return v.is_array() && v.empty(); }
bool is_number(const json& v, double x) { return v.is_number() && v.get<double>() == x; }
bool is_zero(const json& v) { return is_number(v, 0.0) || is_false(v); }
bool is_one(const json& v) { return is_number(v, 1.0); }
bool never(const json&) { return false; }

// vLLM's and llama.cpp's extra fields (OpenAI's own unsupported ones: reject_unsupported).
// Fields with no effect on the output (cache_prompt, id_slot, length_penalty and
// early_stopping without beam search, ...) are left to the unknown-field warning.
constexpr Unimplemented kUnimplemented[] = {
    {"use_beam_search", is_false, "beam search is not implemented"},
    {"allowed_token_ids", never, "not implemented"},
    {"bad_words", is_empty_list, "not implemented"},
    {"verbosity", never, "not implemented"},
    // llama.cpp
    {"n_predict", never, "use 'max_tokens'"},
    {"n_probs", is_zero, "use 'logprobs'"},
    {"repeat_penalty", is_one, "use 'repetition_penalty'"},
    {"mirostat", is_zero, "mirostat sampling is not implemented"},
    {"typical_p", is_one, "typical sampling is not implemented"},
    {"top_a", is_zero, "top-a sampling is not implemented"},
    {"tfs_z", is_one, "tail-free sampling is not implemented"},
    {"dynatemp_range", is_zero, "dynamic temperature is not implemented"},
    {"dry_multiplier", is_zero, "DRY sampling is not implemented"},
    {"xtc_probability", is_zero, "XTC sampling is not implemented"},
    {"top_n_sigma", [](const json& v) { return v.is_number() && v.get<double>() <= 0; },
     "top-n-sigma sampling is not implemented"},
    {"min_keep", is_zero, "not implemented"},
    {"samplers", never, "the sampler order is fixed"},
    {"t_max_predict_ms", is_zero, "not implemented"},
    {"lora", is_empty_list, "adapters are not implemented"},
};

/// 400 for a kUnimplemented field holding a value that requests something, and for best_of
/// other than n (octet returns n samples, it does not rank best_of of them).
void reject_unimplemented(Fields& f, const GenerateRequest& r) {
  for (const Unimplemented& u : kUnimplemented) {
    const json* v = f.get(u.key);
    if (v && !u.neutral(*v))
      throw bad_request("'" + std::string(u.key) + "' " + describe_json(*v) +
                            " is not supported by octet: " + u.why,
                        u.key);
  }
  if (auto best_of = f.integer("best_of"); best_of && *best_of != r.n)
    unsupported("best_of", "only best_of = n is supported (no ranking of extra samples)");
}

std::vector<std::string> parse_stop(const json& v) {
  std::vector<std::string> stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& s : v) {
      if (!s.is_string())
        throw bad_request("'stop' must be a string or a list of strings", "stop");
      stop.push_back(s.get<std::string>());
    }
  } else {
    throw bad_request("'stop' must be a string or a list of strings, got " + type_name(v),
                      "stop");
  }
  for (const auto& s : stop)
    if (s.empty()) throw bad_request("'stop' strings must not be empty", "stop");
  return stop;
}

std::vector<int32_t> parse_token_ids(const json& v, const char* key) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const auto& t : v) {
    auto i = as_integer(t);
    if (!i || *i < 0 || *i > std::numeric_limits<int32_t>::max())
      throw bad_request(std::string("'") + key + "' must hold token ids in [0, 2147483647], got " +
                            describe_json(t),
                        key);
    ids.push_back(static_cast<int32_t>(*i));
  }
  return ids;
}

/// Fields shared by both endpoints: sampling, n, stream, stop, penalties, priority, user.
void parse_common(Fields& f, GenerateRequest& r) {
  SamplingParams& p = r.params;
  if (auto m = f.string("model")) r.model = *m;
  // Ranges of the sampling fields: SamplingParams::validate() (validate_sampling below).
  if (auto v = f.float32("temperature")) p.temperature = *v;
  if (auto v = f.float32("top_p")) p.top_p = *v;
  if (auto v = f.integer("top_k")) p.top_k = *v;
  if (auto v = f.float32("min_p")) p.min_p = *v;
  if (auto v = f.float32("presence_penalty")) p.presence_penalty = *v;
  if (auto v = f.float32("frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = f.float32("repetition_penalty")) p.repetition_penalty = *v;
  if (const json* v = f.get("seed")) {
    // Any 64-bit integer, as vLLM's; -1 keeps its meaning of no seed (clients send it for a
    // random one), every other value seeds the request's RNG (SamplingParams::seed).
    const std::optional<int64_t> seed = as_integer(*v);
    if (!seed)
      throw bad_request("'seed' must be an integer in [-2^63, 2^63) (-1: no seed), got " +
                            (v->is_number() ? f.as_sent("seed", *v) : type_name(*v)),
                        "seed");
    if (*seed != -1) p.seed = *seed;
  }
  static const std::string n_rule = "in [1, " + std::to_string(kMaxN) + "]";
  if (auto v = f.integer("n", n_rule.c_str())) {
    if (*v < 1 || *v > kMaxN)
      throw bad_request("'n' must be " + n_rule + ", got " + std::to_string(*v), "n");
    r.n = *v;
  }
  if (const json* v = f.get("stop")) p.stop = parse_stop(*v);
  if (const json* v = f.get("stop_token_ids")) {
    if (!v->is_array())
      throw bad_request("'stop_token_ids' must be a list of token ids", "stop_token_ids");
    p.stop_token_ids = parse_token_ids(*v, "stop_token_ids");
  }
  if (auto v = f.boolean("ignore_eos")) p.ignore_eos = *v;
  if (auto v = f.integer("min_tokens", ">= 0")) {
    if (*v < 0)
      throw bad_request("'min_tokens' must be >= 0, got " + std::to_string(*v), "min_tokens");
    p.min_tokens = *v;
  }
  if (auto v = f.boolean("skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = f.boolean("include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (const json* v = f.get("logit_bias")) {
    if (!v->is_object())
      throw bad_request("'logit_bias' must be an object of token id -> bias", "logit_bias");
    // Every malformed key is named in one message (vLLM lists all the bad ids), at most
    // kMaxNamedKeys of them.
    constexpr size_t kMaxNamedKeys = 16;
    std::vector<std::string> bad_keys;
    size_t num_bad_keys = 0;
    for (auto it = v->begin(); it != v->end(); ++it) {
      // A key is a decimal token id in [0, 2^31): digits only (no sign, space or exponent)
      // and no leading zero ("05" would be a second entry for token 5).
      const std::string& key = it.key();
      const bool digits = !key.empty() && key.size() <= 10 &&
                          key.find_first_not_of("0123456789") == std::string::npos &&
                          (key[0] != '0' || key.size() == 1);
      const long long id = digits ? std::stoll(key) : -1;
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        if (num_bad_keys++ < kMaxNamedKeys) bad_keys.push_back(describe_json(json(key), 40));
        continue;
      }
      if (!it.value().is_number())
        throw bad_request("'logit_bias' values must be numbers, got " + type_name(it.value()),
                          "logit_bias");
      const double b = it.value().get<double>();
      // The range [-100, 100] is SamplingParams::validate()'s; a double outside float's
      // range must not reach the cast.
      if (!(std::fabs(b) <= FLT_MAX))
        throw bad_request("'logit_bias' values must be in [-100, 100], got " + fmt(b),
                          "logit_bias");
      p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
    if (num_bad_keys > 0) {
      std::string list;
      for (const std::string& k : bad_keys) list += (list.empty() ? "" : ", ") + k;
      if (num_bad_keys > bad_keys.size())
        list += ", ... " + std::to_string(num_bad_keys - bad_keys.size()) + " more";
      throw bad_request("'logit_bias' keys must be token ids in [0, 2147483647], got " +
                            std::to_string(num_bad_keys) + " that are not: " + list,
                        "logit_bias");
    }
    // Canonical keys are unique JSON members, so a repeated id can only come from a duplicate
    // member; either way two entries would add up past the [-100, 100] bound.
    std::vector<int32_t> ids;
    ids.reserve(p.logit_bias.size());
    for (const auto& e : p.logit_bias) ids.push_back(e.first);
    std::sort(ids.begin(), ids.end());
    if (auto d = std::adjacent_find(ids.begin(), ids.end()); d != ids.end())
      throw bad_request("'logit_bias' has token id " + std::to_string(*d) + " more than once",
                        "logit_bias");
  }
  if (auto v = f.boolean("stream")) r.stream = *v;
  if (const json* v = f.get("stream_options")) {
    if (!r.stream)
      throw bad_request("'stream_options' is only allowed when 'stream' is true",
                        "stream_options");
    if (!v->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (it.key() == "include_usage") {
        if (it.value().is_null()) continue;
        if (!it.value().is_boolean())
          throw bad_request("'stream_options.include_usage' must be a boolean",
                            "stream_options.include_usage");
        r.include_usage = it.value().get<bool>();
      } else if (it.key() == "continuous_usage_stats") {  // vLLM: usage on every chunk
        if (it.value().is_null()) continue;
        if (!it.value().is_boolean())
          throw bad_request("'stream_options.continuous_usage_stats' must be a boolean",
                            "stream_options.continuous_usage_stats");
        r.continuous_usage = it.value().get<bool>();
      } else {
        r.unknown_fields.push_back("stream_options." + it.key());
      }
    }
  }
  if (auto v = f.integer("priority")) r.priority = *v;
  if (auto v = f.string("user")) r.user = *v;
}

/// The sampling ranges are SamplingParams::validate()'s (one rule, engine/sampling_params.h):
/// its error becomes a 400 naming the request field.
void validate_sampling(const GenerateRequest& r) {
  SamplingParams p = r.params;
  p.max_tokens = r.max_tokens.value_or(std::numeric_limits<int64_t>::max());  // checked apart
  try {
    p.validate();
  } catch (const SamplingParamError& e) {
    std::string field = e.field();
    if (field == "logprobs" && r.endpoint == Endpoint::kChatCompletions) field = "top_logprobs";
    throw bad_request(e.what(), field);
  }
}

/// max_tokens: absent -> `absent_default` (nullopt = context limit); null -> context limit;
/// an integer >= 0 otherwise.
std::optional<int64_t> parse_max_tokens(Fields& f, const char* key,
                                        std::optional<int64_t> absent_default) {
  if (!f.present(key)) return absent_default;
  auto v = f.integer(key, ">= 0 (or null for up to the context limit)");
  if (!v) return std::nullopt;  // null
  if (*v < 0)
    throw bad_request(std::string("'") + key + "' must be >= 0 (or null for up to the context "
                                                "limit), got " + std::to_string(*v),
                      key);
  return v;
}

void check_min_tokens(const GenerateRequest& r, const char* max_key) {
  if (r.max_tokens && r.params.min_tokens > *r.max_tokens)
    throw bad_request("'min_tokens' (" + std::to_string(r.params.min_tokens) +
                          ") must not exceed '" + max_key + "' (" +
                          std::to_string(*r.max_tokens) + ")",
                      "min_tokens");
}

/// logprobs / top_logprobs / prompt_logprobs: an integer in [0, kMaxLogprobCount], or -1 (vLLM:
/// the whole vocabulary, kLogprobsWholeVocab); nullopt when absent or null. --max-logprobs and
/// the vocabulary bound the count later (resolve_logprobs, the engine).
std::optional<int64_t> logprob_count(Fields& f, const char* key) {
  static const std::string rule =
      "in [0, " + std::to_string(kMaxLogprobCount) + "] or -1 (the whole vocabulary)";
  auto v = f.integer(key, rule.c_str());
  if (!v) return std::nullopt;
  if (*v == -1) return kLogprobsWholeVocab;
  if (*v < 0 || *v > kMaxLogprobCount)
    throw bad_request(std::string("'") + key + "' must be in [0, " +
                          std::to_string(kMaxLogprobCount) +
                          "] or -1 (the whole vocabulary), got " + std::to_string(*v),
                      key);
  return v;
}

/// The engine's value of a logprob count: kLogprobsWholeVocab stays 0 until GenerationJob
/// resolves it against the vocabulary (SamplingParams::validate() bounds the rest).
int64_t engine_logprobs(int64_t k) { return k == kLogprobsWholeVocab ? 0 : k; }

/// vLLM's prompt_logprobs (both endpoints): not with stream.
void parse_prompt_logprobs(Fields& f, GenerateRequest& r) {
  const auto v = logprob_count(f, "prompt_logprobs");
  if (!v) return;
  if (r.stream && *v == 0) return;  // vLLM accepts 0 with stream (and sends nothing)
  if (r.stream)  // as vLLM
    throw bad_request("'prompt_logprobs' is not available when 'stream' is true",
                      "prompt_logprobs");
  r.prompt_logprobs = *v;
  r.params.prompt_logprobs = engine_logprobs(*v);
}

/// vLLM's extra fields shared by both endpoints: return_token_ids, return_tokens_as_token_ids,
/// truncate_prompt_tokens (-1 or >= 0) and truncation_side ("left" | "right").
void parse_vllm_extras(Fields& f, GenerateRequest& r) {
  r.continuous_usage = r.continuous_usage && r.include_usage;  // vLLM: only with include_usage
  if (auto v = f.boolean("return_token_ids")) r.return_token_ids = *v;
  if (auto v = f.boolean("return_tokens_as_token_ids")) r.return_tokens_as_token_ids = *v;
  if (auto v = f.integer("truncate_prompt_tokens", ">= -1 (-1: the context limit)")) {
    if (*v < -1)
      throw bad_request("'truncate_prompt_tokens' must be >= -1 (-1: the context limit), got " +
                            std::to_string(*v),
                        "truncate_prompt_tokens");
    r.truncate_prompt_tokens = *v;
  }
  if (auto v = f.string("truncation_side")) {
    if (*v != "left" && *v != "right")
      throw bad_request("'truncation_side' must be \"left\" or \"right\", got " +
                            describe_json(json(*v)),
                        "truncation_side");
    r.truncate_left = *v == "left";
  }
}

std::vector<PromptInput> parse_prompt(const json* v) {
  if (!v) throw bad_request("'prompt' is required", "prompt");
  std::vector<PromptInput> prompts;
  auto text_prompt = [](const json& s) {
    PromptInput p;
    p.text = s.get<std::string>();
    return p;
  };
  auto ids_prompt = [](const json& a) {
    PromptInput p;
    p.is_token_ids = true;
    p.token_ids = parse_token_ids(a, "prompt");
    if (p.token_ids.empty()) throw bad_request("'prompt' token id lists must not be empty", "prompt");
    return p;
  };
  if (v->is_string()) {
    prompts.push_back(text_prompt(*v));
  } else if (v->is_array()) {
    if (v->empty()) throw bad_request("'prompt' must not be an empty list", "prompt");
    const json& first = (*v)[0];
    if (first.is_string()) {
      for (const auto& s : *v) {
        if (!s.is_string())
          throw bad_request("'prompt' lists must hold only strings or only token ids", "prompt");
        prompts.push_back(text_prompt(s));
      }
    } else if (first.is_number()) {
      prompts.push_back(ids_prompt(*v));
    } else if (first.is_array()) {
      for (const auto& a : *v) {
        if (!a.is_array())
          throw bad_request("'prompt' lists of token id lists must hold only lists", "prompt");
        prompts.push_back(ids_prompt(a));
      }
    } else {
      throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or "
                        "a list of token id lists",
                        "prompt");
    }
  } else {
    throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a "
                      "list of token id lists, got " + type_name(*v),
                      "prompt");
  }
  return prompts;
}

/// A role a chat template may write into the prompt as is: 1 to kMaxRoleBytes letters,
/// digits, '_' or '-' (system, user, assistant, tool, developer, ipython, ...; custom
/// templates may define their own). Anything else (newlines, control characters,
/// "<|im_end|>") could close the turn and open a forged one, whatever the content
/// tokenization, so it gets 400 naming the field.
constexpr size_t kMaxRoleBytes = 64;
void check_role_text(const std::string& value, const std::string& field) {
  const bool ok = !value.empty() && value.size() <= kMaxRoleBytes &&
                  std::all_of(value.begin(), value.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '_' || c == '-';
                  });
  if (!ok)
    throw bad_request("'" + field + "' " + describe_json(json(value)) + " must be 1 to " +
                          std::to_string(kMaxRoleBytes) +
                          " letters, digits, '_' or '-' (e.g. system, user, assistant, tool)",
                      field);
}

/// vLLM's chat_template_kwargs: an object of extra template variables. A value null or "auto"
/// is unset (vLLM's merge_kwargs drops it); a reserved key is ignored and reported as unknown.
void parse_chat_template_kwargs(Fields& f, GenerateRequest& r) {
  const json* v = f.get("chat_template_kwargs");
  if (!v) return;
  if (!v->is_object())
    throw bad_request("'chat_template_kwargs' must be an object of chat template variables, got " +
                          type_name(*v),
                      "chat_template_kwargs");
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (it.value().is_null() || it.value() == "auto") continue;
    if (is_reserved_chat_template_kwarg(it.key())) {
      r.unknown_fields.push_back("chat_template_kwargs." + it.key());
      continue;
    }
    r.chat_template_kwargs[it.key()] = it.value();
  }
}

json parse_messages(const json* v) {
  if (!v) throw bad_request("'messages' is required", "messages");
  if (!v->is_array() || v->empty())
    throw bad_request("'messages' must be a non-empty list of messages", "messages");
  json out = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request("'" + where + "' must be an object", where);
    if (!m.contains("role") || !m["role"].is_string())
      throw bad_request("'" + where + ".role' must be a string", where + ".role");
    check_role_text(m["role"].get_ref<const std::string&>(), where + ".role");
    json msg;
    msg["role"] = m["role"];
    const json content = m.contains("content") ? m["content"] : json(nullptr);
    if (content.is_null()) {
      msg["content"] = "";
    } else if (content.is_string()) {
      msg["content"] = content;
    } else if (content.is_array()) {
      std::string text;
      for (size_t j = 0; j < content.size(); ++j) {
        const json& part = content[j];
        const std::string pw = where + ".content[" + std::to_string(j) + "]";
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          throw bad_request("'" + pw + "' must be an object with a 'type'", pw);
        const std::string type = part["type"];
        if (type != "text")
          throw bad_request("'" + pw + ".type' " + describe_json(part["type"]) +
                                " is not supported: octet serves text only",
                            pw + ".type");
        if (!part.contains("text") || !part["text"].is_string())
          throw bad_request("'" + pw + ".text' must be a string", pw + ".text");
        if (j > 0) text += "\n";
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else {
      throw bad_request("'" + where + ".content' must be a string, a list of text parts or null",
                        where + ".content");
    }
    if (m.contains("name") && !m["name"].is_null()) {
      if (!m["name"].is_string())
        throw bad_request("'" + where + ".name' must be a string", where + ".name");
      // OpenAI's rule for names: ^[^\s<|\\/>]+$ (no whitespace, none of < | \ / >).
      const std::string& name = m["name"].get_ref<const std::string&>();
      if (name.empty() || name.size() > 256 ||
          std::any_of(name.begin(), name.end(), [](char c) {
            return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '<' || c == '|' ||
                   c == '\\' || c == '/' || c == '>';
          }))
        throw bad_request("'" + where + ".name' " + describe_json(m["name"]) +
                              " must be 1 to 256 characters without whitespace, control "
                              "characters or any of < | \\ / >",
                          where + ".name");
      msg["name"] = m["name"];
    }
    parse_message_tool_fields(m, where, msg);  // tool_calls, tool_call_id (tool_request.h)
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

nlohmann::json parse_json_body(const std::string& text, NumberLiterals* literals) {
  // Depth first, without recursion: a scan of the brackets outside strings. nlohmann's parser
  // is iterative and its destructor too (3.11), but dump() and everything that walks a value
  // recursively (error texts, chat templates) would overflow the stack on a deep value.
  if (json_nesting_depth(text, int(kMaxJsonDepth)) > int(kMaxJsonDepth))
    throw bad_request("the JSON body is nested deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels");
  try {
    return parse_json_keeping_literals(text, literals);
  } catch (const json::parse_error& e) {
    // e.what() quotes the last token read, which can be most of the body: bounded.
    throw bad_request("malformed JSON: " + truncate_text(e.what(), 200));
  } catch (const json::out_of_range& e) {
    // A number literal too large for a double (1e999999).
    throw bad_request("malformed JSON: a number is out of range (" +
                      truncate_text(e.what(), 200) + ")");
  } catch (const json::exception& e) {
    throw bad_request("malformed JSON: " + truncate_text(e.what(), 200));
  }
}

void keep_chat_template_kwargs_order(GenerateRequest& r, const std::string& body_text) {
  using ojson = nlohmann::ordered_json;
  if (r.chat_template_kwargs.empty()) return;
  ojson body;
  try {
    body = ojson::parse(body_text);
  } catch (const ojson::exception&) {
    return;  // parsed once already
  }
  if (!body.is_object() || !body.contains("chat_template_kwargs") ||
      !body["chat_template_kwargs"].is_object())
    return;
  ojson ordered = ojson::object();
  for (auto it = body["chat_template_kwargs"].begin(); it != body["chat_template_kwargs"].end();
       ++it)
    if (r.chat_template_kwargs.contains(it.key())) ordered[it.key()] = it.value();
  if (ordered.size() == r.chat_template_kwargs.size()) r.chat_template_kwargs = std::move(ordered);
}

std::optional<int64_t> choice_seed(std::optional<int64_t> seed, int64_t i) {
  if (!seed) return seed;
  // In uint64, where it cannot overflow: the RNG seeds (two's complements) are seed's + i.
  return static_cast<int64_t>(static_cast<uint64_t>(*seed) + static_cast<uint64_t>(i));
}

int64_t resolve_max_tokens(int64_t n_prompt, std::optional<int64_t> requested,
                           int64_t max_model_len) {
  return requested ? *requested : max_tokens_left(n_prompt, max_model_len);
}

GenerateRequest parse_completion_request(const json& body, const NumberLiterals* literals) {
  Fields f(body, literals);
  GenerateRequest r;
  r.endpoint = Endpoint::kCompletions;
  reject_unsupported(f, r.endpoint);
  r.prompts = parse_prompt(f.get("prompt"));
  parse_common(f, r);
  r.params.structured_outputs = parse_structured_outputs(body);
  reject_unimplemented(f, r);
  // OpenAI's completions default max_tokens is 16; null means up to the context limit.
  r.max_tokens = parse_max_tokens(f, "max_tokens", int64_t{16});
  check_min_tokens(r, "max_tokens");
  if (auto v = logprob_count(f, "logprobs")) r.logprobs = *v;
  if (auto v = f.boolean("echo")) r.echo = *v;
  if (auto v = f.boolean("add_special_tokens")) r.add_special_tokens = *v;
  parse_prompt_logprobs(f, r);
  r.params.logprobs = engine_logprobs(r.logprobs);
  if (r.echo && r.logprobs >= 0)
    r.params.prompt_logprobs = std::max(r.params.prompt_logprobs, engine_logprobs(r.logprobs));
  parse_vllm_extras(f, r);
  validate_sampling(r);
  r.unknown_fields = [&] {
    auto u = f.unknown();
    u.insert(u.end(), r.unknown_fields.begin(), r.unknown_fields.end());
    return u;
  }();
  return r;
}

GenerateRequest parse_chat_request(const json& body, const NumberLiterals* literals) {
  Fields f(body, literals);
  GenerateRequest r;
  r.endpoint = Endpoint::kChatCompletions;
  reject_unsupported(f, r.endpoint);
  r.messages = parse_messages(f.get("messages"));
  parse_common(f, r);
  for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"}) f.present(key);
  r.tools = parse_tool_request(body);
  r.params.structured_outputs = parse_structured_outputs(body);
  reject_unimplemented(f, r);
  // max_completion_tokens replaces the deprecated max_tokens; absent or null: context limit.
  const bool has_mct = f.present("max_completion_tokens");
  auto mct = parse_max_tokens(f, "max_completion_tokens", std::nullopt);
  auto mt = parse_max_tokens(f, "max_tokens", std::nullopt);
  r.max_tokens = has_mct && mct ? mct : mt;
  check_min_tokens(r, has_mct && mct ? "max_completion_tokens" : "max_tokens");
  const bool logprobs = f.boolean("logprobs").value_or(false);
  const auto top = logprob_count(f, "top_logprobs");
  if (top && *top != 0 && !logprobs)  // vLLM: top_logprobs 0 passes without logprobs
    throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  r.chat_logprobs = logprobs;
  r.logprobs = logprobs ? top.value_or(0) : -1;
  r.params.logprobs = engine_logprobs(r.logprobs);
  if (auto v = f.boolean("add_generation_prompt")) r.add_generation_prompt = *v;
  // vLLM: false for chat (the template writes the BOS itself).
  r.add_special_tokens = f.boolean("add_special_tokens").value_or(false);
  parse_prompt_logprobs(f, r);
  if (auto v = f.boolean("echo")) r.echo = *v;
  // vLLM: echo without prompt_logprobs scores the prompt with top_logprobs (default 0, whether
  // or not logprobs is true), and a non-streaming response carries them.
  if (r.echo && r.prompt_logprobs < 0 && !r.stream) {
    r.prompt_logprobs = top.value_or(0);
    r.params.prompt_logprobs = engine_logprobs(r.prompt_logprobs);
  }
  if (auto v = f.boolean("continue_final_message")) r.continue_final_message = *v;
  parse_chat_template_kwargs(f, r);
  // vLLM (and Hugging Face's apply_chat_template): add_generation_prompt defaults to true, so
  // continue_final_message needs add_generation_prompt: false.
  if (r.continue_final_message && r.add_generation_prompt)
    throw bad_request("Cannot set both 'continue_final_message' and 'add_generation_prompt' to "
                      "true (add_generation_prompt defaults to true: send false)",
                      "continue_final_message");
  parse_vllm_extras(f, r);
  validate_sampling(r);
  auto u = f.unknown();
  u.insert(u.end(), r.unknown_fields.begin(), r.unknown_fields.end());
  r.unknown_fields = u;
  return r;
}

}  // namespace octet::server
