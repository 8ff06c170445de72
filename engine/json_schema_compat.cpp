#include "engine/json_schema_compat.h"

#include <string_view>

#include <nlohmann/json.hpp>

namespace octet {

namespace {

using ojson = nlohmann::ordered_json;

bool is_literal_key(std::string_view k) {
  return k == "enum" || k == "const" || k == "default" || k == "examples";
}

bool is_schema_map_key(std::string_view k) {
  return k == "properties" || k == "patternProperties" || k == "$defs" ||
         k == "definitions" || k == "dependentSchemas";
}

// Rewrites schema `s` and its subschemas in place; true when anything changed.
bool rewrite(ojson& s) {
  if (!s.is_object()) return false;
  bool changed = false;
  if (auto it = s.find("items"); it != s.end() && it->is_array() && !s.contains("prefixItems")) {
    ojson prefix = std::move(*it);
    s.erase("items");
    if (auto add = s.find("additionalItems"); add != s.end()) {
      ojson rest = std::move(*add);
      s.erase("additionalItems");
      s["items"] = std::move(rest);
    }
    s["prefixItems"] = std::move(prefix);
    changed = true;
  }
  for (auto& [key, value] : s.items()) {
    if (is_literal_key(key)) continue;
    if (is_schema_map_key(key) && value.is_object()) {
      for (auto& [name, sub] : value.items()) changed = rewrite(sub) || changed;
    } else if (value.is_array()) {
      for (ojson& sub : value) changed = rewrite(sub) || changed;
    } else {
      changed = rewrite(value) || changed;
    }
  }
  return changed;
}

}  // namespace

std::optional<std::string> rewrite_tuple_items(const std::string& schema) {
  if (schema.find("\"items\"") == std::string::npos) return std::nullopt;
  ojson s = ojson::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded() || !rewrite(s)) return std::nullopt;
  return s.dump();
}

}  // namespace octet
