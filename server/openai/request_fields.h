#pragma once
// Typed reads of one JSON request object's fields, with vLLM-style 400s naming the field, and
// the keys never read (so that unknown fields can be reported).
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/json_literals.h"

namespace octet::server {

/// Deepest nesting of arrays and objects a request body may have (the top-level object is
/// depth 1). A chat request with content parts is 5 deep ({messages: [{content: [{...}]}]}), a
/// tool schema rarely 20; the limit stops deep bodies before anything walks them recursively.
/// JSON text inside a string field (parse_json_text) has the same limit of its own.
inline constexpr int64_t kMaxJsonDepth = 64;

/// JSON text carried in a string field (an assistant tool call's arguments, a schema sent as
/// text), parsed. Throws ApiError 400 naming `param`: "'<field>' is nested deeper than 64
/// levels" (checked first, without recursion: dump() and the chat template walk values
/// recursively) or "'<field>' is not valid JSON".
nlohmann::json parse_json_text(const std::string& text, const std::string& field,
                               const std::string& param);

/// "null", "boolean", "string", "array", "object", "integer", "number": a JSON value's type
/// as error messages name it.
std::string type_name(const nlohmann::json& v);

/// The integer a JSON number holds (2, 2.0 and 1e16 do: an integer in int64, or an integral
/// float of magnitude below 2^63, as pydantic reads an int from a float; 2.5 does not), or
/// nullopt.
std::optional<int64_t> as_integer(const nlohmann::json& v);

/// Reads the fields of one request object and remembers which keys were looked at. Every
/// typed getter returns nullopt for an absent or null key and throws ApiError 400 naming the
/// key for a value of the wrong type or range. Holds references: `body` and `literals` must
/// outlive it.
class Fields {
 public:
  /// Throws ApiError 400 when `body` is not an object. `literals` (optional) are the
  /// number literals as sent (parse_json_body), used to quote numbers in errors.
  explicit Fields(const nlohmann::json& body, const NumberLiterals* literals = nullptr);

  bool present(const char* key);
  /// The value, or nullptr when absent or null.
  const nlohmann::json* get(const char* key);
  /// A finite number.
  std::optional<double> number(const char* key);
  /// A number that a float holds: beyond FLT_MAX is a 400; a nonzero value below the smallest
  /// float keeps its sign as the smallest denormal (vLLM reads doubles: 1e-300 stays > 0).
  std::optional<float> float32(const char* key);
  /// An integer in int64 (2.0 qualifies). `rule` (e.g. "in [1, 128]"), when given, is the
  /// field's own range, quoted instead of int64's when the value is no int64 integer.
  std::optional<int64_t> integer(const char* key, const char* rule = nullptr);
  std::optional<bool> boolean(const char* key);
  std::optional<std::string> string(const char* key);

  /// A number as the client wrote it: its literal when it parsed as a double (1e30 stays
  /// "1e30", -9223372036854775809 is not shown as -9.223372036854776e+18).
  std::string as_sent(const char* key, const nlohmann::json& v) const;

  /// The keys of the body never looked at, in the body's order.
  std::vector<std::string> unknown() const;

 private:
  const nlohmann::json& body_;
  const NumberLiterals* literals_;
  std::set<std::string> seen_;
};

}  // namespace octet::server
