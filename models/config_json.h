#pragma once
// Reading the small JSON files of a model directory (config.json, generation_config.json,
// tokenizer_config.json) and their fields so that every problem is a ModelFileError
// "<path>: <field>: <problem>": bounded file size and nesting, integers range-checked before
// they are narrowed, and values quoted in messages without unbounded dumps.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace octet {

/// Nesting depth accepted in these files (config.json nests 3 to 4 levels deep).
inline constexpr int kMaxConfigJsonDepth = 64;

/// Parses the JSON text [begin, end) of the model file `path` (config.json, an index, a
/// safetensors header, tokenizer.json) with at most `max_depth` nested objects/arrays, checked on
/// the text before parsing, so that a hostile file cannot exhaust the stack or grow a deep tree.
/// Throws ModelFileError(path, "malformed JSON: ..." or "JSON nested deeper than N levels ...").
nlohmann::json parse_model_json(const std::string& path, const char* begin, const char* end,
                                int max_depth = kMaxConfigJsonDepth);

/// The JSON object in `path`, read with read_file_bounded(path, max_bytes) and parsed by
/// parse_model_json. Throws ModelFileError(path, problem) when the file cannot be read, is
/// larger than max_bytes, is malformed, nests deeper than max_depth, or is not an object.
nlohmann::json read_json_object(const std::string& path, std::size_t max_bytes,
                                int max_depth = kMaxConfigJsonDepth);

/// read_json_object(path, kMaxJsonConfigBytes): config.json, generation_config.json and the like.
nlohmann::json read_config_json(const std::string& path);

/// `text` (the contents of `path`) parsed as read_config_json does.
nlohmann::json parse_config_json(const std::string& text, const std::string& path);

/// A one-line description of `v` for messages, without deep recursion and at most ~600
/// characters: scalars as JSON (strings cut at 60 bytes), arrays of at most 8 scalars in full,
/// other arrays and objects as "an array of N" / "an object with N keys".
std::string json_brief(const nlohmann::json& v);

/// `v` as an integer in [min, max]. Throws ModelFileError(path, field + ": must be an integer
/// in [min, max], got <v>") for a float, string, bool, null or out-of-range value (including
/// unsigned values beyond int64).
int64_t json_int_in_range(const nlohmann::json& v, const std::string& path,
                          const std::string& field, int64_t min, int64_t max);

/// obj[key] as token ids: an integer, or (`list_ok`) a list of integers, each in
/// [0, 2^31 - 1]; empty when absent or null. Throws ModelFileError(path, "key: ..." or
/// "key[i]: ...") for any other value. (Whether the ids fit the vocabulary is the caller's check.)
std::vector<int32_t> json_token_ids(const nlohmann::json& obj, const std::string& key,
                                    const std::string& path, bool list_ok);

}  // namespace octet
