#pragma once
// Options whose value is a JSON list of strings, as vLLM reads them (`type=json.loads`):
// --allowed-origins '["http://localhost:3000"]'. Parsed once to check it at start-up, and again
// where the value is used.
#include <string>
#include <string_view>
#include <vector>

namespace octet {

/// The strings of `text`, a JSON list of strings ('["*"]', '[]'). Throws std::invalid_argument
/// naming `flag` and quoting the value for anything else: not JSON, not a list, an element
/// that is not a string, or a string holding a control character (it would end up in a
/// response header).
std::vector<std::string> parse_json_string_list(std::string_view text, std::string_view flag);

/// `items` as the JSON list parse_json_string_list reads back (a YAML sequence in a --config
/// file becomes the option's value this way).
std::string json_string_list(const std::vector<std::string>& items);

}  // namespace octet
