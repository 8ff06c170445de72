#include "models/config_json.h"

#include <climits>

#include <nlohmann/json.hpp>

#include "config/file_read.h"
#include "models/model_file_error.h"

namespace octet {

namespace {

using nlohmann::json;

/// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string parser_message(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind("[json.exception.", 0) == 0)
    if (const size_t close = m.find("] "); close != std::string::npos) m.erase(0, close + 2);
  return m;
}

}  // namespace

json parse_model_json(const std::string& path, const char* begin, const char* end,
                      int max_depth) {
  // The depth is checked on the text, before the parser builds anything. (nlohmann's parser
  // callback would do it as it goes, but its callback parser rescans the parent container at
  // the end of every object: quadratic for a list of objects such as added_tokens.)
  if (json_nesting_depth(std::string_view(begin, size_t(end - begin)), max_depth) > max_depth)
    throw ModelFileError(path, "JSON nested deeper than " + std::to_string(max_depth) +
                                   " levels (corrupt or hostile file)");
  try {
    return json::parse(begin, end);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for "1e999"
    throw ModelFileError(path, "malformed JSON: " + parser_message(e));
  }
}

json parse_config_json(const std::string& text, const std::string& path) {
  json j = parse_model_json(path, text.data(), text.data() + text.size(), kMaxConfigJsonDepth);
  if (!j.is_object()) throw ModelFileError(path, "not a JSON object (got " + json_brief(j) + ")");
  return j;
}

json read_json_object(const std::string& path, std::size_t max_bytes, int max_depth) {
  std::string text;
  try {
    text = read_file_bounded(path, max_bytes);
  } catch (const FileReadError& e) {
    throw ModelFileError(e.path(), e.problem());
  }
  json j = parse_model_json(path, text.data(), text.data() + text.size(), max_depth);
  if (!j.is_object()) throw ModelFileError(path, "not a JSON object (got " + json_brief(j) + ")");
  return j;
}

json read_config_json(const std::string& path) { return read_json_object(path, kMaxJsonConfigBytes); }

std::string json_brief(const json& v) {
  switch (v.type()) {
    case json::value_t::array: {
      // A short array of scalars in full ("[1, 2]"); anything else by its size.
      bool scalars = v.size() <= 8;
      for (size_t i = 0; scalars && i < v.size(); ++i)
        scalars = !v[i].is_array() && !v[i].is_object();
      if (!scalars) return "an array of " + std::to_string(v.size());
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_brief(v[i]);
      return out + "]";
    }
    case json::value_t::object:
      return "an object with " + std::to_string(v.size()) + " keys";
    case json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      if (s.size() <= 60) return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
      return json(s.substr(0, 60)).dump(-1, ' ', false, json::error_handler_t::replace) + "...";
    }
    default:
      return v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

int64_t json_int_in_range(const json& v, const std::string& path, const std::string& field,
                          int64_t min, int64_t max) {
  bool ok = false;
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = u <= static_cast<uint64_t>(max) && max >= 0;
    x = ok ? static_cast<int64_t>(u) : 0;
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
    ok = true;
  }
  if (!ok || x < min || x > max)
    throw ModelFileError(path, field + ": must be an integer in [" + std::to_string(min) + ", " +
                                   std::to_string(max) + "], got " + json_brief(v));
  return x;
}

std::vector<int32_t> json_token_ids(const json& obj, const std::string& key,
                                    const std::string& path, bool list_ok) {
  constexpr int64_t kMaxId = INT32_MAX;
  std::vector<int32_t> ids;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ids;
  if (it->is_array() && list_ok) {
    for (size_t i = 0; i < it->size(); ++i)
      ids.push_back(static_cast<int32_t>(
          json_int_in_range((*it)[i], path, key + "[" + std::to_string(i) + "]", 0, kMaxId)));
  } else {
    ids.push_back(static_cast<int32_t>(json_int_in_range(*it, path, key, 0, kMaxId)));
  }
  return ids;
}

}  // namespace octet
