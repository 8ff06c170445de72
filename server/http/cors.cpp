#include "server/http/cors.h"

#include <algorithm>
#include <set>

#include "config/json_string_list.h"

namespace octet::server {

namespace {

/// The request headers a page may always send (Starlette's SAFELISTED_HEADERS).
const char* const kSafelistedHeaders[] = {"Accept", "Accept-Language", "Content-Language",
                                          "Content-Type"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

/// A request's value may be echoed into a response head: no CR, LF or NUL (Beast's parser
/// never yields them; checked so that no caller can split a response head).
bool echoable(std::string_view v) {
  return v.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string field(std::string_view name, std::string_view value) {
  return std::string(name) + ": " + std::string(value) + "\r\n";
}

}  // namespace

CorsPolicy::CorsPolicy(std::vector<std::string> origins, std::vector<std::string> methods,
                       std::vector<std::string> headers, bool allow_credentials)
    : origins_(std::move(origins)),
      methods_(std::move(methods)),
      all_origins_(contains(origins_, "*")),
      all_headers_(contains(headers, "*")),
      credentials_(allow_credentials) {
  if (contains(methods_, "*")) methods_.assign(std::begin(kAllMethods), std::end(kAllMethods));
  // The header names a preflight may ask for: the configured ones and the safelisted ones,
  // listed sorted (byte order, as Starlette's sorted()) in Access-Control-Allow-Headers.
  std::set<std::string> names(headers.begin(), headers.end());
  names.insert(std::begin(kSafelistedHeaders), std::end(kSafelistedHeaders));
  for (const std::string& h : names) {
    headers_lower_.push_back(lower(h));
    allow_headers_ += (allow_headers_.empty() ? "" : ", ") + h;
  }
}

CorsPolicy CorsPolicy::from_config(const ServeConfig& c) {
  return CorsPolicy(parse_json_string_list(c.allowed_origins, "--allowed-origins"),
                    parse_json_string_list(c.allowed_methods, "--allowed-methods"),
                    parse_json_string_list(c.allowed_headers, "--allowed-headers"),
                    c.allow_credentials);
}

bool CorsPolicy::is_preflight(const CorsRequest& r) {
  return r.method == "OPTIONS" && r.origin && r.request_method;
}

bool CorsPolicy::origin_allowed(std::string_view origin) const {
  return echoable(origin) && (all_origins_ || contains(origins_, origin));
}

CorsPreflight CorsPolicy::preflight(const CorsRequest& r) const {
  CorsPreflight out;
  std::vector<std::string> failures;
  // Every origin, credentials off: "*", whatever the origin; otherwise the origin itself when
  // allowed, and Vary: Origin either way (the answer depends on it).
  const bool explicit_origin = !all_origins_ || credentials_;
  const std::string_view origin = r.origin.value_or("");
  if (origin_allowed(origin))
    out.fields += field("Access-Control-Allow-Origin", explicit_origin ? origin : "*");
  else
    failures.push_back("origin");
  if (explicit_origin) out.fields += field("Vary", "Origin");
  if (!contains(methods_, r.request_method.value_or(""))) failures.push_back("method");
  out.fields += field("Access-Control-Allow-Methods", joined(methods_));
  if (r.request_headers) {
    if (all_headers_) {
      // Every header allowed: the requested ones are echoed (a browser reads no "*" here when
      // credentials are on).
      if (echoable(*r.request_headers))
        out.fields += field("Access-Control-Allow-Headers", *r.request_headers);
      else
        failures.push_back("headers");
    } else {
      std::string_view rest = *r.request_headers;
      for (;;) {
        const size_t comma = rest.find(',');
        if (!contains(headers_lower_, lower(trimmed(rest.substr(0, comma))))) {
          failures.push_back("headers");
          break;
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
  }
  if (!all_headers_) out.fields += field("Access-Control-Allow-Headers", allow_headers_);
  out.fields += field("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
  if (credentials_) out.fields += field("Access-Control-Allow-Credentials", "true");
  if (failures.empty()) {
    out.body = "OK";
  } else {
    out.status = 400;
    out.body = "Disallowed CORS " + joined(failures);
  }
  return out;
}

std::string CorsPolicy::response_fields(const CorsRequest& r) const {
  if (!r.origin || !origin_allowed(*r.origin)) return "";
  std::string fields;
  // A request with cookies, or any with credentials on, must see its own origin: browsers
  // refuse "*" on a credentialed response.
  if (all_origins_ && !credentials_ && !r.has_cookie)
    fields = field("Access-Control-Allow-Origin", "*");
  else
    fields = field("Access-Control-Allow-Origin", *r.origin) + field("Vary", "Origin");
  if (credentials_) fields += field("Access-Control-Allow-Credentials", "true");
  return fields;
}

}  // namespace octet::server
