#include "server/http_message.h"

#include <sstream>

#include <boost/beast/http.hpp>

namespace octet::server {

namespace http = boost::beast::http;

std::string serialize_response(int status, const std::string& content_type,
                               const std::string& body, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "octet");
  res.set(http::field::content_type, content_type);
  res.keep_alive(keep_alive);
  res.body() = body;
  res.prepare_payload();
  std::ostringstream os;
  os << res;
  return os.str();
}

std::string sse_head(bool keep_alive) {
  http::response<http::empty_body> res{http::status::ok, 11};
  res.set(http::field::server, "octet");
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  res.keep_alive(keep_alive);
  res.chunked(true);
  std::ostringstream os;
  os << res.base();
  return os.str();
}

std::string http_chunk(const std::string& data) {
  if (data.empty()) return "";
  std::ostringstream os;
  os << std::hex << data.size() << "\r\n" << data << "\r\n";
  return os.str();
}

}  // namespace octet::server
