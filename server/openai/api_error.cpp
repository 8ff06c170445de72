#include "server/openai/api_error.h"

#include <algorithm>

namespace octet::server {

std::string error_type(int status) {
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

ApiError to_api_error(const RequestError& e, const std::string& prompt_field) {
  const std::string param = e.param() == "prompt" ? prompt_field : e.param();
  switch (e.kind()) {
    case RequestErrorKind::InvalidRequest: return ApiError(400, e.message(), param);
    case RequestErrorKind::ContextLengthExceeded:
      return ApiError(400, e.message(), param, "context_length_exceeded");
    case RequestErrorKind::ModelNotFound: return ApiError(404, e.message(), param, "model_not_found");
  }
  return ApiError(400, e.message(), param);
}

nlohmann::json error_json(int status, const std::string& message, const std::string& param,
                          const std::string& code) {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = error_type(status);
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}};
}

namespace {

/// Length of the longest prefix of s of at most n bytes that ends at a character boundary.
size_t utf8_prefix(const std::string& s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // continuation byte
  return n;
}

std::string scalar(const nlohmann::json& v, size_t max_chars) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const size_t keep = utf8_prefix(s, max_chars);
    return nlohmann::json(s.substr(0, keep))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
           (keep < s.size() ? "..." : "");
  }
  if (v.is_array()) return v.empty() ? "[]" : "[...]";
  if (v.is_object()) return v.empty() ? "{}" : "{...}";
  return v.dump();  // number, boolean, null: short
}

}  // namespace

std::string truncate_text(const std::string& text, size_t max_bytes) {
  const size_t keep = utf8_prefix(text, max_bytes);
  return keep < text.size() ? text.substr(0, keep) + "..." : text;
}

std::string describe_json(const nlohmann::json& v, size_t max_chars) {
  if (!v.is_structured()) return scalar(v, max_chars);
  std::string out = v.is_array() ? "[" : "{";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (out.size() >= max_chars) {
      out += ", ...";
      break;
    }
    if (!first) out += ", ";
    first = false;
    if (v.is_object()) out += scalar(nlohmann::json(it.key()), max_chars) + ": ";
    out += scalar(*it, max_chars);
  }
  out += v.is_array() ? "]" : "}";
  return out;
}

std::string field_names_for_log(const std::vector<std::string>& names) {
  std::string out;
  const size_t shown = std::min(names.size(), kMaxLoggedNames);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += truncate_text(names[i], kMaxLoggedNameBytes);
  }
  if (names.size() > shown) out += ", ... " + std::to_string(names.size() - shown) + " more";
  return out;
}

}  // namespace octet::server
