// fuzz-layer: server
// libFuzzer harness: request body bytes -> parse_json_body -> parse_completion_request and
// parse_chat_request (server/openai/openai_request.h), as routes.cpp runs them. The expected failures
// of a bad body are ApiError (400) and std::invalid_argument; anything else escaping (another
// exception, a crash, a sanitizer report, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/openai_request.h"

namespace {

// Runs one parse and touches what it returns (so the optimizer keeps it).
template <typename Parse>
void parse_one(const nlohmann::json& body, Parse parse) {
  try {
    const octet::server::GenerateRequest r = parse(body);
    volatile size_t sink = r.prompts.size() + r.messages.size() + r.unknown_fields.size();
    (void)sink;
  } catch (const octet::server::ApiError&) {
  } catch (const std::invalid_argument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json body;
  try {
    body = octet::server::parse_json_body(text);
  } catch (const octet::server::ApiError&) {
    return 0;
  } catch (const std::invalid_argument&) {
    return 0;
  }
  parse_one(body, [](const nlohmann::json& b) { return octet::server::parse_completion_request(b); });
  parse_one(body, [](const nlohmann::json& b) { return octet::server::parse_chat_request(b); });
  return 0;
}
