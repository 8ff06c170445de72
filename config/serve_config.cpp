#include "config/serve_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <yaml-cpp/yaml.h>

#include "config/file_read.h"
#include "config/json_string_list.h"

namespace octet {

namespace {

std::string flag(const std::string& key) {
  std::string s = "--" + key;
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

}  // namespace

bool ServeConfig::is_json_list(const std::string& key) {
  return key == "allowed_origins" || key == "allowed_methods" || key == "allowed_headers";
}

void ServeConfig::apply_config_file(const std::string& path) {
  const std::string where = "--config " + path;
  // The file itself: read within kMaxConfigFileBytes, then parsed from memory (yaml-cpp's
  // LoadFile reads /dev/zero for ever). A file that cannot be read or parsed, or repeats a key,
  // is a bad file (std::runtime_error: exit 1); a bad option in it is a usage error as the
  // same flag would be (std::invalid_argument: exit 2).
  std::string text;
  try {
    text = read_file_bounded(path, kMaxConfigFileBytes);
  } catch (const FileReadError& e) {
    throw std::runtime_error("--config " + std::string(e.what()));
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(where + ": not valid YAML: " + e.what());
  }
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap()) throw std::invalid_argument(where + ": expected a mapping of option keys");
  // Keys first: scalars, each once (yaml-cpp keeps the first of a repeated key and drops the
  // others silently, so a file that sets port twice would not do what its last line says).
  std::set<std::string> given;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      throw std::runtime_error(where + ": line " + std::to_string(kv.first.Mark().line + 1) +
                               ": a key must be a plain option name");
    const std::string key = kv.first.Scalar();
    if (!given.insert(key).second)
      throw std::runtime_error(where + ": line " + std::to_string(kv.first.Mark().line + 1) +
                               ": '" + key + "' is set more than once");
  }
  std::set<std::string> known;
  visit(*this, [&](auto& field, const char* key, const char*) {
    using T = std::remove_reference_t<decltype(field)>;
    known.insert(key);
    if (!given.count(key)) return;
    const YAML::Node node = root[key];
    if (std::string(key) == "config")
      throw std::invalid_argument(where + ": 'config' cannot be set in a file");
    if constexpr (std::is_same_v<T, std::string>) {
      // A JSON-list option as a YAML sequence (allowed_origins: [http://a.example]); as a
      // scalar it is the JSON text itself, as the flag takes it.
      if (is_json_list(key) && !node.IsScalar()) {
        const std::string error = where + ": '" + key + "' must be a list of strings";
        if (!node.IsSequence()) throw std::invalid_argument(error);
        std::vector<std::string> items;
        for (const auto& item : node) {
          if (!item.IsScalar()) throw std::invalid_argument(error);
          items.push_back(item.Scalar());
        }
        field = json_string_list(items);
        return;
      }
    }
    if (!node.IsScalar())
      throw std::invalid_argument(where + ": '" + key + "' must be a scalar");
    try {
      field = node.as<T>();
    } catch (const YAML::Exception&) {
      const char* type = std::is_same_v<T, bool>      ? "a boolean"
                         : std::is_integral_v<T>      ? "an integer"
                         : std::is_floating_point_v<T> ? "a number"
                                                       : "a string";
      throw std::invalid_argument(where + ": '" + key + "' must be " + type + ", got '" +
                                  node.Scalar() + "'");
    }
  });
  for (const std::string& key : given)
    if (!known.count(key)) throw std::invalid_argument(where + ": unknown option '" + key + "'");
}

std::string ServeConfig::env_var_name(const std::string& key) {
  std::string s = "OCTET_" + key;
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::vector<std::string> ServeConfig::with_environment(
    std::vector<std::string> args, const std::function<const char*(const std::string&)>& getenv) {
  auto given = [&](const std::string& f) {
    return std::any_of(args.begin() + (args.empty() ? 0 : 1), args.end(), [&](const std::string& a) {
      return a == f || a.rfind(f + "=", 0) == 0;
    });
  };
  std::vector<std::string> added;
  ServeConfig defaults;
  visit(defaults, [&](auto& field, const char* key, const char*) {
    using T = std::remove_reference_t<decltype(field)>;
    const std::string f = flag(key);
    const std::string name = env_var_name(key);
    const char* value = getenv(name);
    if (!value || !*value) return;
    if constexpr (std::is_same_v<T, bool>) {
      if (given(f) || given("--no-" + f.substr(2))) return;
      std::string v(value);
      for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (v == "1" || v == "true" || v == "yes" || v == "on") added.push_back(f);
      else if (v == "0" || v == "false" || v == "no" || v == "off")
        added.push_back("--no-" + f.substr(2));
      else
        throw std::invalid_argument(name + " must be 1, true, yes, on, 0, false, no or off, got '" +
                                    std::string(value) + "'");
    } else {
      if (given(f)) return;
      added.push_back(f);
      added.push_back(value);
    }
  });
  args.insert(args.end(), added.begin(), added.end());
  return args;
}

void ServeConfig::validate() const {
  // Integers: positive and at most `max` (what the type or the arithmetic using it can hold).
  auto in_range = [](int64_t v, int64_t min, int64_t max, const char* key, const char* why) {
    if (v >= min && v <= max) return;
    std::ostringstream os;
    if (min == 1 && v < 1) os << flag(key) << " must be positive, got " << v;
    else os << flag(key) << " must be in [" << min << ", " << max << "]" << why << ", got " << v;
    throw std::invalid_argument(os.str());
  };
  auto timeout = [](double v, bool zero_ok, const char* key) {
    if ((zero_ok ? v >= 0 : v > 0) && v <= kMaxTimeoutSeconds) return;
    std::ostringstream os;
    if (!(v > 0) && !(zero_ok && v == 0))
      os << flag(key) << " must be " << (zero_ok ? ">= 0" : "positive") << ", got " << v;
    else
      os << flag(key) << " must be at most " << kMaxTimeoutSeconds << " seconds (one week), got "
         << v;
    throw std::invalid_argument(os.str());
  };
  constexpr int64_t kTiB = int64_t{1} << 40;
  if (host.empty()) throw std::invalid_argument("--host must not be empty");
  if (!root_path.empty() &&
      (root_path[0] != '/' || root_path.size() < 2 || root_path.back() == '/' ||
       root_path.find_first_of("?#% \t\r\n") != std::string::npos || root_path.size() > 1024))
    throw std::invalid_argument(
        "--root-path must be a path prefix such as /llm: starting with '/', not ending with '/', "
        "without ?, #, % or whitespace, got '" + root_path.substr(0, 64) + "'");
  parse_json_string_list(allowed_origins, "--allowed-origins");
  parse_json_string_list(allowed_methods, "--allowed-methods");
  parse_json_string_list(allowed_headers, "--allowed-headers");
  if (!tool_call_parser.empty() && tool_call_parser != "hermes" &&
      tool_call_parser != "llama3_json" && tool_call_parser != "mistral")
    throw std::invalid_argument("--tool-call-parser must be hermes, llama3_json or mistral, got '" +
                                tool_call_parser + "'");
  if (enable_auto_tool_choice && tool_call_parser.empty())  // vLLM refuses this too
    throw std::invalid_argument("--enable-auto-tool-choice requires --tool-call-parser");
  if (port < 0 || port > 65535)
    throw std::invalid_argument("--port must be in [0, 65535], got " + std::to_string(port));
  in_range(max_body_bytes, 1, kTiB, "max_body_bytes", " (1 TiB)");
  // The HTTP parser's header limit is a uint32.
  in_range(max_header_bytes, 1, std::numeric_limits<uint32_t>::max(), "max_header_bytes",
           " (the parser's 32-bit limit)");
  timeout(idle_timeout, false, "idle_timeout");
  timeout(read_timeout, false, "read_timeout");
  timeout(shutdown_timeout, true, "shutdown_timeout");
  in_range(max_num_waiting, 1, int64_t{1} << 30, "max_num_waiting", "");
  // -1: no cap, the vocabulary size (vLLM); token ids are int32, so no vocabulary is larger.
  in_range(max_logprobs, -1, std::numeric_limits<int32_t>::max(), "max_logprobs",
           " (-1 = the vocabulary size)");
  in_range(http_threads, 1, 256, "http_threads", "");
  in_range(num_prepare_threads, 1, 256, "num_prepare_threads", "");
  in_range(max_queued_prepares, 1, int64_t{1} << 20, "max_queued_prepares", "");
  in_range(max_connections, 1, int64_t{1} << 20, "max_connections", "");
  in_range(max_total_body_bytes, 1, kTiB, "max_total_body_bytes", " (1 TiB)");
  if (max_total_body_bytes < max_body_bytes)
    throw std::invalid_argument("--max-total-body-bytes (" + std::to_string(max_total_body_bytes) +
                                ") must be >= --max-body-bytes (" +
                                std::to_string(max_body_bytes) +
                                "): a largest body would always get 503");
  if (log_format != "text" && log_format != "json")
    throw std::invalid_argument("--log-format must be text or json, got '" + log_format + "'");
  static const std::set<std::string> levels = {"trace", "debug", "info",     "warning",
                                               "warn",  "error", "critical", "off"};
  if (!levels.count(log_level))
    throw std::invalid_argument("--log-level must be trace, debug, info, warning, error, "
                                "critical or off, got '" + log_level + "'");
  engine.validate();
}

}  // namespace octet
