#include "server/api_error.h"

namespace octet::server {

std::string error_type(int status) {
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

nlohmann::json error_json(int status, const std::string& message, const std::string& param,
                          const std::string& code) {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = error_type(status);
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}};
}

}  // namespace octet::server
