#pragma once
// Comma-separated positive integers of a command-line flag ("1,4,16"), shared by the bench
// subcommands.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace octet {

/// The positive integers of `s`, in order; empty items are skipped ("" gives none). Throws
/// std::invalid_argument naming `flag` for an item that is not a positive integer.
inline std::vector<int64_t> parse_list(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw std::invalid_argument(std::string(flag) + ": '" + item + "' is not a positive integer");
    }
  }
  return out;
}

}  // namespace octet
