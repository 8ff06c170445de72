#include "server/http/request_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>


namespace octet::server {

namespace {

thread_local const std::string* t_request_id = nullptr;
thread_local const AccessLogEntry* t_access = nullptr;  // set while log_access logs

bool id_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == ':' || c == '~' || c == '+' || c == '/' || c == '=' ||
         c == '-';
}

/// "2026-12-01 16:52:31.123" (sep ' ') or "2026-12-01T16:52:31.123Z" (sep 'T'), UTC.
std::string utc_time(std::chrono::system_clock::time_point t, char sep) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(std::chrono::floor<std::chrono::seconds>(ms).count());
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d%c%02d:%02d:%02d.%03d%s", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, sep, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count() % 1000), sep == 'T' ? "Z" : "");
  return buf;
}

std::string_view level_name(spdlog::level::level_enum level) {
  const auto name = spdlog::level::to_string_view(level);
  return std::string_view(name.data(), name.size());
}

void append(spdlog::memory_buf_t& dest, std::string_view s) { dest.append(s.data(), s.data() + s.size()); }

/// A message with its control bytes escaped (one physical line).
void append_escaped(spdlog::memory_buf_t& dest, std::string_view s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      dest.push_back(ch);
      continue;
    }
    char buf[8];
    const char* esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : nullptr;
    if (!esc) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      esc = buf;
    }
    append(dest, esc);
  }
}

double one_decimal(double v) { return std::round(v * 10.0) / 10.0; }

class TextFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    dest.push_back('[');
    append(dest, utc_time(msg.time, ' '));
    append(dest, "] [");
    append(dest, level_name(msg.level));
    append(dest, "] ");
    if (t_request_id && !t_request_id->empty()) {
      dest.push_back('[');
      append_escaped(dest, *t_request_id);  // valid ids need no escaping; belt and braces
      append(dest, "] ");
    }
    append_escaped(dest, std::string_view(msg.payload.data(), msg.payload.size()));
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<TextFormatter>();
  }
};

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::ordered_json j;
    j["time"] = utc_time(msg.time, 'T');
    j["level"] = std::string(level_name(msg.level));
    if (t_request_id && !t_request_id->empty()) j["request_id"] = *t_request_id;
    j["message"] = std::string(msg.payload.data(), msg.payload.size());
    if (const AccessLogEntry* e = t_access) {
      j["method"] = e->method;
      j["path"] = e->path;
      j["status"] = e->status;
      j["prompt_tokens"] = e->prompt_tokens;
      j["completion_tokens"] = e->completion_tokens;
      j["ttft_ms"] = e->ttft_ms < 0 ? nlohmann::ordered_json(nullptr)
                                    : nlohmann::ordered_json(one_decimal(e->ttft_ms));
      j["latency_ms"] = one_decimal(e->latency_ms);
    }
    // Invalid UTF-8 (a client's bytes in a message) becomes U+FFFD instead of throwing.
    append(dest, j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

bool valid_request_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (const char c : id)
    if (!id_char(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string new_request_id() {
  thread_local std::mt19937_64 rng{[] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

std::string request_id_for(std::string_view client_id) {
  return valid_request_id(client_id) ? std::string(client_id) : new_request_id();
}

RequestLogScope::RequestLogScope(const std::string& id) : previous_(t_request_id) {
  t_request_id = &id;
}

RequestLogScope::~RequestLogScope() { t_request_id = previous_; }

const std::string& current_request_id() {
  static const std::string none;
  return t_request_id ? *t_request_id : none;
}

std::string access_log_message(const AccessLogEntry& e) {
  char ttft[32] = "-";
  if (e.ttft_ms >= 0) std::snprintf(ttft, sizeof ttft, "%.1f", e.ttft_ms);
  char latency[32];
  std::snprintf(latency, sizeof latency, "%.1f", e.latency_ms);
  return e.method + " " + e.path + " " + std::to_string(e.status) +
         " prompt_tokens=" + std::to_string(e.prompt_tokens) +
         " completion_tokens=" + std::to_string(e.completion_tokens) + " ttft_ms=" + ttft +
         " latency_ms=" + latency;
}

void log_access(const AccessLogEntry& e) {
  const AccessLogEntry* previous = t_access;
  t_access = &e;
  spdlog::info("{}", access_log_message(e));
  t_access = previous;
}

std::unique_ptr<spdlog::formatter> make_log_formatter(const std::string& format) {
  if (format == "text") return std::make_unique<TextFormatter>();
  if (format == "json") return std::make_unique<JsonFormatter>();
  throw std::invalid_argument("--log-format must be text or json, got '" + format + "'");
}

void configure_logging(const std::string& format, const std::string& level) {
  auto formatter = make_log_formatter(format);
  const auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    throw std::invalid_argument("--log-level must be trace, debug, info, warning, error, "
                                "critical or off, got '" + level + "'");
  spdlog::default_logger()->set_formatter(std::move(formatter));
  spdlog::set_level(lvl);
}

}  // namespace octet::server
