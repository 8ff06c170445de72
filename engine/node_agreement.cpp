// Multi-node start-up agreement (engine/node_agreement.h).
#include "engine/node_agreement.h"

#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace octet {

std::string shared_engine_flags(const EngineArgs& args) {
  EngineArgs copy = args;
  std::string text;
  EngineArgs::visit(copy, [&](auto& field, const char* name, const char*) {
    using T = std::decay_t<decltype(field)>;
    const std::string n = name;
    if (n == "model" || n == "tokenizer" || n == "kv_scales_path" || n == "node_rank" ||
        n == "threads")
      return;
    std::ostringstream os;
    if constexpr (std::is_same_v<T, std::string>) {
      os << field;
    } else if constexpr (std::is_arithmetic_v<T>) {
      os << std::setprecision(17) << field;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                         std::is_same_v<T, std::vector<int64_t>>) {
      for (const auto& e : field) os << e << ",";
    } else {
      os << "?";
    }
    text += n + "=" + os.str() + "\n";
  });
  return text;
}

void agree_with_node0(HostChannel& ch, const std::string& text,
                      const std::function<std::string(const std::string&)>& check) {
  std::vector<uint8_t> bytes(text.begin(), text.end());
  ch.broadcast_bytes(bytes, 0);
  const std::string node0(bytes.begin(), bytes.end());
  std::string first_error;
  for (int r = 1; r < ch.world_size(); ++r) {
    std::string verdict = ch.rank() == r ? check(node0) : "";
    std::vector<uint8_t> v(verdict.begin(), verdict.end());
    ch.broadcast_bytes(v, r);
    if (!v.empty() && first_error.empty())
      first_error = "node " + std::to_string(r) + ": " + std::string(v.begin(), v.end());
  }
  if (!first_error.empty()) throw std::invalid_argument(first_error);
}

std::string first_difference(const std::string& mine, const std::string& node0,
                             const std::string& what) {
  std::istringstream a(mine), b(node0);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la)),
               gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) return "";
    if (!ga || !gb || la != lb)
      return what + " differ from node 0's: " + (ga ? la : "(none)") + " here, " +
             (gb ? lb : "(none)") + " on node 0 (start every node with the same model and "
             "flags)";
  }
}

}  // namespace octet
