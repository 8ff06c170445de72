#pragma once
// JSON parsing that keeps the text of the number literals a double cannot hold exactly, so that
// an error message can quote a value as the client sent it: -9223372036854775809 or 1e30 in an
// integer field, not -9.223372036854776e+18 or 1e+30 (the double nlohmann parsed it into).
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace octet::server {

/// Top-level member name -> the literal text of its value, for the members whose value parsed
/// as a floating-point number (a fraction, an exponent, or an integer outside [-2^63, 2^64)).
using NumberLiterals = std::map<std::string, std::string>;

/// json::parse(text) that also records NumberLiterals into `literals` (when not null). Throws
/// what json::parse throws (parse_error, out_of_range for 1e999999).
nlohmann::json parse_json_keeping_literals(const std::string& text, NumberLiterals* literals);

}  // namespace octet::server
