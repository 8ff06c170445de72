#pragma once
// Reading tokenizer.json / tokenizer_config.json as untrusted input: a bounded read, a nesting
// depth checked on the raw text before parsing, and typed field accessors that never copy a
// subtree and turn every wrong type into a ModelFileError naming the file and the field.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace octet::tokenizer_detail {

/// Deepest nesting of [ and { that a tokenizer file may have (real ones: under 10).
inline constexpr int kMaxTokenizerJsonDepth = 128;

/// read_json_object(path, max_bytes, kMaxTokenizerJsonDepth) (models/config_json.h).
nlohmann::json read_json_file(const std::string& path, std::size_t max_bytes);

/// Typed access to one field of a JSON object, for error messages naming `where` + key.
/// Absent or null fields give the fallback; a field of another type throws ModelFileError.
class JsonFields {
 public:
  JsonFields(const std::string& path, const nlohmann::json& object, std::string where)
      : path_(path), j_(object), where_(std::move(where)) {}

  /// The field, or nullptr when absent or null (never copied).
  const nlohmann::json* find(const char* key) const;
  std::string str(const char* key, const std::string& fallback = "") const;
  bool flag(const char* key, bool fallback) const;
  int64_t integer(const char* key, int64_t fallback) const;
  /// An array field; absent/null: an empty array.
  const nlohmann::json& array(const char* key) const;
  /// "<where>.<key>" for messages.
  std::string name(const char* key) const { return where_.empty() ? key : where_ + "." + key; }
  [[noreturn]] void fail(const std::string& problem) const;
  const std::string& path() const { return path_; }
  const nlohmann::json& object() const { return j_; }

 private:
  const std::string& path_;
  const nlohmann::json& j_;
  std::string where_;
};

/// `problem` made one line for a ModelFileError: control bytes as \xNN, cut to 512 bytes.
std::string one_line(std::string_view problem);

/// `s` as a JSON string literal (quotes, escapes: one line), cut to its first 64 bytes.
std::string quote(std::string_view s);

}  // namespace octet::tokenizer_detail
