#include "config/serve_config.h"

#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <yaml-cpp/yaml.h>

namespace octet {

namespace {

std::string flag(const std::string& key) {
  std::string s = "--" + key;
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

}  // namespace

void ServeConfig::apply_config_file(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument("--config: cannot read '" + path + "'");
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("--config " + path + ": " + e.what());
  }
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap())
    throw std::invalid_argument("--config " + path + ": expected a mapping of option keys");
  std::set<std::string> known;
  visit(*this, [&](auto& field, const char* key, const char*) {
    using T = std::remove_reference_t<decltype(field)>;
    known.insert(key);
    const YAML::Node node = root[key];
    if (!node) return;
    if (std::string(key) == "config")
      throw std::invalid_argument("--config " + path + ": 'config' cannot be set in a file");
    if (!node.IsScalar())
      throw std::invalid_argument("--config " + path + ": '" + key + "' must be a scalar");
    try {
      field = node.as<T>();
    } catch (const YAML::Exception&) {
      const char* type = std::is_same_v<T, bool>      ? "a boolean"
                         : std::is_integral_v<T>      ? "an integer"
                         : std::is_floating_point_v<T> ? "a number"
                                                       : "a string";
      throw std::invalid_argument("--config " + path + ": '" + key + "' must be " + type +
                                  ", got '" + node.Scalar() + "'");
    }
  });
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key))
      throw std::invalid_argument("--config " + path + ": unknown option '" + key + "'");
  }
}

void ServeConfig::validate() const {
  auto positive = [](double v, const char* key) {
    if (v > 0 && std::isfinite(v)) return;
    std::ostringstream os;
    os << flag(key) << " must be positive, got " << v;
    throw std::invalid_argument(os.str());
  };
  if (host.empty()) throw std::invalid_argument("--host must not be empty");
  if (port < 0 || port > 65535)
    throw std::invalid_argument("--port must be in [0, 65535], got " + std::to_string(port));
  positive(static_cast<double>(max_body_bytes), "max_body_bytes");
  positive(static_cast<double>(max_header_bytes), "max_header_bytes");
  positive(idle_timeout, "idle_timeout");
  positive(read_timeout, "read_timeout");
  if (!(shutdown_timeout >= 0) || !std::isfinite(shutdown_timeout))
    throw std::invalid_argument("--shutdown-timeout must be >= 0");
  positive(static_cast<double>(max_num_waiting), "max_num_waiting");
  if (http_threads < 1 || http_threads > 256)
    throw std::invalid_argument("--http-threads must be in [1, 256], got " +
                                std::to_string(http_threads));
  engine.validate();
}

}  // namespace octet
