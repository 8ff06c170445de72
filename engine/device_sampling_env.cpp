#include "engine/device_sampling_env.h"

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace octet {

int device_sampling_override() {
  const char* v = std::getenv("OCTET_DEVICE_SAMPLING");
  if (v == nullptr || *v == '\0') return -1;
  std::string s = v;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return 1;
  if (s == "0" || s == "false" || s == "no" || s == "off") return 0;
  throw std::invalid_argument(
      "OCTET_DEVICE_SAMPLING must be 1, true, yes, on, 0, false, no or off, not '" +
      std::string(v) + "'");
}

}  // namespace octet
