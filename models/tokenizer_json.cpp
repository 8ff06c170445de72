#include "models/tokenizer_json.h"

#include <cstdio>

#include "models/config_json.h"
#include "models/model_file_error.h"

namespace octet::tokenizer_detail {

using nlohmann::json;

json read_json_file(const std::string& path, std::size_t max_bytes) {
  return read_json_object(path, max_bytes, kMaxTokenizerJsonDepth);
}

const json* JsonFields::find(const char* key) const {
  if (!j_.is_object()) return nullptr;
  const auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

void JsonFields::fail(const std::string& problem) const {
  throw ModelFileError(path_, one_line(problem));
}

std::string JsonFields::str(const char* key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(name(key) + " is not a string");
  return v->get<std::string>();
}

bool JsonFields::flag(const char* key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(name(key) + " is not a boolean");
  return v->get<bool>();
}

int64_t JsonFields::integer(const char* key, int64_t fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number_integer()) fail(name(key) + " is not an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
    fail(name(key) + " is out of range");
  return v->get<int64_t>();
}

const json& JsonFields::array(const char* key) const {
  static const json kEmpty = json::array();
  const json* v = find(key);
  if (!v) return kEmpty;
  if (!v->is_array()) fail(name(key) + " is not an array");
  return *v;
}

std::string one_line(std::string_view problem) {
  constexpr size_t kMax = 512;
  std::string out;
  for (size_t i = 0; i < problem.size() && out.size() < kMax; ++i) {
    const auto c = static_cast<unsigned char>(problem[i]);
    if (c < 0x20 || c == 0x7F) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02X", c);
      out += esc;
    } else {
      out += char(c);
    }
  }
  if (out.size() >= kMax) out += "...";
  return out;
}

std::string quote(std::string_view s) {
  const bool cut = s.size() > 64;
  std::string out = json(std::string(s.substr(0, 64)))
                        .dump(-1, ' ', false, json::error_handler_t::replace);
  if (cut) out += "...";
  return out;
}

}  // namespace octet::tokenizer_detail
