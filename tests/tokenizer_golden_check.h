#pragma once
// Test helper: checks a tokenizer against a golden JSON made by scripts/make_tokenizer_golden.py
// ({"cases": [{"text", "ids": {mode: [...]}, "decode": {"skip_special", "keep_special"}}]}),
// every encode mode and both decode modes; each mismatch is reported with both sides.
#include <catch2/catch.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/tokenizer.h"

namespace octet::testing {

using nlohmann::json;

inline std::string ids_str(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? ", " : "") << ids[i];
  s << "]";
  return s.str();
}

/// JSON-escaped text, so that whitespace and control characters are visible in failures.
inline std::string shown(const std::string& text) { return json(text).dump(); }

struct Mode {
  const char* name;
  bool add_special, parse_special;
};
constexpr Mode kModes[] = {{"bos_parse", true, true},
                           {"bos_noparse", true, false},
                           {"nobos_parse", false, true},
                           {"nobos_noparse", false, false}};

/// Checks every case; returns the number of mismatches (each one reported with both id lists).
inline int check_golden(const Tokenizer& tok, const json& golden) {
  int mismatches = 0;
  for (const json& c : golden["cases"]) {
    const std::string text = c["text"];
    for (const Mode& m : kModes) {
      const auto expected = c["ids"][m.name].get<std::vector<int32_t>>();
      const auto got = tok.encode(text, m.add_special, m.parse_special);
      if (got != expected) {
        ++mismatches;
        FAIL_CHECK("encode " << m.name << " " << shown(text) << "\n  expected " << ids_str(expected)
                             << "\n  got      " << ids_str(got));
      }
    }
    const auto ids = c["ids"]["bos_parse"].get<std::vector<int32_t>>();
    for (const bool skip : {true, false}) {
      const std::string expected = c["decode"][skip ? "skip_special" : "keep_special"];
      const std::string got = tok.decode(ids, skip);
      if (got != expected) {
        ++mismatches;
        FAIL_CHECK("decode skip_special=" << skip << " of " << ids_str(ids) << " (text "
                                          << shown(text) << ")\n  expected " << shown(expected)
                                          << "\n  got      " << shown(got));
      }
    }
  }
  return mismatches;
}

}  // namespace octet::testing
