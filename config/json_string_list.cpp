#include "config/json_string_list.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace octet {

std::vector<std::string> parse_json_string_list(std::string_view text, std::string_view flag) {
  auto refuse = [&](const std::string& why) {
    const std::string shown =
        text.size() > 200 ? std::string(text.substr(0, 200)) + "..." : std::string(text);
    throw std::invalid_argument(std::string(flag) +
                                " must be a JSON list of strings such as "
                                "'[\"http://localhost:3000\"]', got '" + shown + "' (" + why +
                                ")");
  };
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) refuse("not JSON");
  if (!j.is_array()) refuse("not a list");
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string()) refuse("element " + std::to_string(i) + " is not a string");
    const std::string& s = j[i].get_ref<const std::string&>();
    for (const char c : s)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        refuse("element " + std::to_string(i) + " holds a control character");
    out.push_back(s);
  }
  return out;
}

std::string json_string_list(const std::vector<std::string>& items) {
  // Bytes that are not UTF-8 (a YAML file may hold any) become U+FFFD rather than throw.
  return nlohmann::json(items).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace octet
