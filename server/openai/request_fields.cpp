#include "server/openai/request_fields.h"

#include <cfloat>
#include <cmath>
#include <limits>

#include "config/file_read.h"
#include "server/openai/api_error.h"

namespace octet::server {

using nlohmann::json;

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

std::optional<int64_t> as_integer(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // An integral double of magnitude below 2^63 (pydantic's int from float: 1e16 is 10^16).
    // Not -2^63: the integer literals just below int64 (-9223372036854775809 ...) parse as
    // doubles that round to it.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9223372036854775808.0)
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

Fields::Fields(const json& body, const NumberLiterals* literals)
    : body_(body), literals_(literals) {
  if (!body.is_object())
    throw bad_request("the request body must be a JSON object, got " + type_name(body));
}

bool Fields::present(const char* key) {
  seen_.insert(key);
  return body_.contains(key);
}

const json* Fields::get(const char* key) {
  seen_.insert(key);
  auto it = body_.find(key);
  if (it == body_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> Fields::number(const char* key) {
  const json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number())
    throw bad_request(std::string("'") + key + "' must be a number, got " + type_name(*v), key);
  const double d = v->get<double>();
  if (!std::isfinite(d)) throw bad_request(std::string("'") + key + "' must be finite", key);
  return d;
}

std::optional<float> Fields::float32(const char* key) {
  const auto d = number(key);
  if (!d) return std::nullopt;
  if (std::fabs(*d) > FLT_MAX)
    throw bad_request(std::string("'") + key + "' is out of range for a 32-bit float, got " +
                          as_sent(key, json(*d)),
                      key);
  const float f = static_cast<float>(*d);
  if (f == 0.0f && *d != 0.0)
    return std::copysign(std::numeric_limits<float>::denorm_min(), static_cast<float>(*d));
  return f;
}

std::optional<int64_t> Fields::integer(const char* key, const char* rule) {
  const json* v = get(key);
  if (!v) return std::nullopt;
  auto i = as_integer(*v);
  if (!i) {
    const bool integral = v->is_number_unsigned() ||
                          (v->is_number_float() && v->get<double>() == std::floor(v->get<double>()));
    const std::string range = rule != nullptr ? std::string(" ") + rule
                              : integral      ? std::string(" in [-2^63, 2^63)")
                                              : std::string();
    throw bad_request(std::string("'") + key + "' must be an integer" + range + ", got " +
                          (v->is_number() ? as_sent(key, *v) : type_name(*v)),
                      key);
  }
  return i;
}

std::optional<bool> Fields::boolean(const char* key) {
  const json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw bad_request(std::string("'") + key + "' must be a boolean, got " + type_name(*v), key);
  return v->get<bool>();
}

std::optional<std::string> Fields::string(const char* key) {
  const json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string())
    throw bad_request(std::string("'") + key + "' must be a string, got " + type_name(*v), key);
  return v->get<std::string>();
}

std::string Fields::as_sent(const char* key, const json& v) const {
  if (literals_ && v.is_number_float())
    if (auto it = literals_->find(key); it != literals_->end())
      return truncate_text(it->second, 64);
  return describe_json(v);
}

std::vector<std::string> Fields::unknown() const {
  std::vector<std::string> out;
  for (auto it = body_.begin(); it != body_.end(); ++it)
    if (!seen_.count(it.key())) out.push_back(it.key());
  return out;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& field,
                               const std::string& param) {
  if (json_nesting_depth(text, int(kMaxJsonDepth)) > int(kMaxJsonDepth))
    throw bad_request("'" + field + "' is nested deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels",
                      param);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw bad_request("'" + field + "' is not valid JSON", param);
  }
}

}  // namespace octet::server
