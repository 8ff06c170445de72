#include "bench/load_client.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <stdexcept>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "config/file_read.h"

namespace octet::bench {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

BaseUrl parse_base_url(const std::string& url) {
  // A hand-written scanner (std::regex recursed once per character: a long URL overflowed the
  // stack). Accepts http://HOST[:PORT][/PATH], HOST a name or [IPv6], PATH printable, no spaces.
  const auto bad = [&url] {
    return std::invalid_argument("--base-url '" + url.substr(0, 200) +
                                 "' is not http://HOST[:PORT][/PATH]");
  };
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) throw bad();
  BaseUrl b;
  size_t i = scheme.size();
  if (i < url.size() && url[i] == '[') {
    const size_t close = url.find(']', i);
    if (close == std::string::npos || close == i + 1) throw bad();
    b.host = url.substr(i + 1, close - i - 1);
    for (char c : b.host)
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') throw bad();
    i = close + 1;
  } else {
    size_t j = i;
    while (j < url.size() &&
           (std::isalnum(static_cast<unsigned char>(url[j])) || url[j] == '.' || url[j] == '-'))
      ++j;
    if (j == i) throw bad();
    b.host = url.substr(i, j - i);
    i = j;
  }
  if (i < url.size() && url[i] == ':') {
    size_t j = i + 1;
    while (j < url.size() && std::isdigit(static_cast<unsigned char>(url[j]))) ++j;
    const std::string p = url.substr(i + 1, j - i - 1);
    if (p.empty()) throw bad();
    if (p.size() > 5 || std::stoi(p) < 1 || std::stoi(p) > 65535)
      throw std::invalid_argument("--base-url '" + url.substr(0, 200) + "': port must be 1..65535");
    b.port = p;
    i = j;
  }
  if (i < url.size() && url[i] != '/') throw bad();
  for (size_t k = i; k < url.size(); ++k)
    if (static_cast<unsigned char>(url[k]) <= 0x20 || url[k] == 0x7f) throw bad();
  b.prefix = url.substr(i);
  while (!b.prefix.empty() && b.prefix.back() == '/') b.prefix.pop_back();
  return b;
}

nlohmann::json request_body(const ClientOptions& o, const RequestSpec& r) {
  nlohmann::json j;
  j["model"] = o.model;
  const bool chat = o.endpoint.find("chat") != std::string::npos;
  if (chat) {
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", r.prompt}}});
    j["max_completion_tokens"] = r.max_tokens;
  } else {
    j["prompt"] = r.prompt;
    j["max_tokens"] = r.max_tokens;
  }
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (o.ignore_eos) j["ignore_eos"] = true;
  if (o.temperature) j["temperature"] = *o.temperature;
  return j;
}

namespace {

// Seconds as a timer duration, clamped to [0, kMaxWaitSeconds] (a double beyond the clock's
// range would be undefined behaviour when converted; NaN counts as 0).
Clock::duration to_duration(double seconds) {
  const double s = seconds > 0 ? std::min(seconds, kMaxWaitSeconds) : 0.0;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// An error message as one line of printable ASCII: the server's bytes in it (an error body, a
// reason phrase) are shown as \xNN, so that they can neither break the terminal or the line
// nor make the result JSON invalid UTF-8.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

// usage.<key> as a token count: absent or null = nullopt; an integer in [0, kMaxUsageTokens]
// else a runtime_error (a negative or 2^62 count would poison the totals).
std::optional<int64_t> usage_tokens(const nlohmann::json& usage, const char* key) {
  auto it = usage.find(key);
  if (it == usage.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned() && it->get<uint64_t>() <= static_cast<uint64_t>(kMaxUsageTokens))
    return static_cast<int64_t>(it->get<uint64_t>());
  if (it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() >= 0 &&
      it->get<int64_t>() <= kMaxUsageTokens)
    return it->get<int64_t>();
  throw std::runtime_error("the server reported usage." + std::string(key) + " = " +
                           it->dump().substr(0, 40) + ", not a token count (an integer in [0, " +
                           std::to_string(kMaxUsageTokens) + "])");
}

}  // namespace

nlohmann::json parse_reply_json(const std::string& text) {
  // The depth is checked on the text first: "[[[[..." stops at kMaxJsonDepth instead of
  // building millions of nested arrays (no parser callback: nlohmann's callback parser is
  // quadratic in a list of objects, such as a ShareGPT file).
  if (json_nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

void SseAccumulator::feed(const std::string& bytes, double now_s) {
  buffer_ += bytes;
  // An event ends at a blank line: '\n', an optional '\r', '\n' ("\n\n" or "\r\n\r\n"). Each
  // byte is searched once: the scan resumes where the last feed stopped (less the two bytes
  // that may begin a separator), and consumed events are erased once per feed.
  size_t start = 0;
  size_t from = scanned_ > 2 ? scanned_ - 2 : 0;
  for (;;) {
    size_t nl = buffer_.find('\n', from);
    size_t next = std::string::npos;  // first byte after the blank line
    while (nl != std::string::npos) {
      if (nl + 1 < buffer_.size() && buffer_[nl + 1] == '\n') {
        next = nl + 2;
        break;
      }
      if (nl + 2 < buffer_.size() && buffer_[nl + 1] == '\r' && buffer_[nl + 2] == '\n') {
        next = nl + 3;
        break;
      }
      nl = buffer_.find('\n', nl + 1);
    }
    if (next == std::string::npos) break;
    // Join the event's data lines; skip comments (":" pings) and other fields.
    std::string data;
    size_t pos = start;
    while (pos < nl) {
      size_t eol = buffer_.find('\n', pos);
      if (eol == std::string::npos || eol > nl) eol = nl;
      size_t len = eol - pos;
      if (len > 0 && buffer_[pos + len - 1] == '\r') --len;
      if (len >= 5 && buffer_.compare(pos, 5, "data:") == 0) {
        size_t v = pos + 5, vlen = len - 5;
        if (vlen > 0 && buffer_[v] == ' ') ++v, --vlen;
        data.append(buffer_, v, vlen);
      }
      pos = eol + 1;
    }
    if (!data.empty()) event(data, now_s);
    start = from = next;
  }
  buffer_.erase(0, start);
  scanned_ = buffer_.size();
  if (buffer_.size() > kMaxSseEventBytes)
    throw std::runtime_error("an SSE event is longer than " + std::to_string(kMaxSseEventBytes) +
                             " bytes (the limit of one event)");
}

void SseAccumulator::event(const std::string& data, double now_s) {
  if (data == "[DONE]") {
    saw_done_ = true;
    return;
  }
  const nlohmann::json j = parse_reply_json(data);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error("an SSE event is not JSON (or nests deeper than " +
                             std::to_string(kMaxJsonDepth) + "): '" + data.substr(0, 120) + "'");
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto c = usage_tokens(*u, "completion_tokens")) record_.output_tokens = *c;
    if (auto p = usage_tokens(*u, "prompt_tokens")) record_.prompt_len = *p;
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) return;
  const nlohmann::json& c = (*choices)[0];
  if (!c.is_object()) return;
  const nlohmann::json* text = nullptr;
  if (chat_) {
    if (auto d = c.find("delta"); d != c.end() && d->is_object())
      if (auto t = d->find("content"); t != d->end()) text = &*t;
  } else if (auto t = c.find("text"); t != c.end()) {
    text = &*t;
  }
  if (!text || !text->is_string() || text->get_ref<const std::string&>().empty()) return;
  const std::string& piece = text->get_ref<const std::string&>();
  if (piece.size() > kMaxStreamTextBytes - record_.generated_text.size())
    throw std::runtime_error("the stream's text passed " + std::to_string(kMaxStreamTextBytes) +
                             " bytes (the limit of one response)");
  if (record_.itl.size() + 1 >= kMaxStreamTextChunks)
    throw std::runtime_error("the stream passed " + std::to_string(kMaxStreamTextChunks) +
                             " text chunks (the limit of one response)");
  if (!saw_text_) {
    record_.ttft = now_s - record_.start_time;
    saw_text_ = true;
  } else {
    record_.itl.push_back(now_s - last_s_);
  }
  last_s_ = now_s;
  record_.latency = now_s - record_.start_time;
  record_.generated_text += piece;
}

namespace {

std::string target(const ClientOptions& o, const std::string& path) {
  return o.base.prefix + path;
}

std::string host_header(const ClientOptions& o) {
  return o.base.host + (o.base.port == "80" ? "" : ":" + o.base.port);
}

struct Runner;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Runner& r, size_t i);
  void start();

 private:
  bool expired() const { return timed_out_ || Clock::now() >= deadline_; }
  void fail(const std::string& what);
  void fail_timeout();
  void on_connect(beast::error_code ec);
  void on_write(beast::error_code ec);
  void on_header(beast::error_code ec);
  void read_more();
  void on_read(beast::error_code ec);
  void on_error_body(beast::error_code ec);
  void done();

  // Raw bytes waiting to be parsed (a header line, a chunk header); the body itself is parsed
  // as it arrives, so this bounds nothing a real server needs.
  static constexpr size_t kMaxBufferBytes = size_t{1} << 20;

  Runner& run_;
  size_t index_;
  beast::tcp_stream stream_;
  net::steady_timer deadline_timer_;
  Clock::time_point deadline_;
  bool timed_out_ = false, finished_ = false;
  beast::flat_buffer buffer_{kMaxBufferBytes};
  http::request<http::string_body> req_;
  http::response_parser<http::string_body> parser_;
  RequestRecord& rec_;
  SseAccumulator acc_;
};

struct Runner {
  const ClientOptions& options;
  const std::vector<RequestSpec>& requests;
  std::vector<RequestRecord> records;
  net::io_context ioc;
  tcp::resolver::results_type endpoints;
  Clock::time_point t0;
  std::optional<int64_t> max_concurrency;
  int64_t in_flight = 0;
  std::deque<size_t> waiting;  // arrived, waiting for a concurrency slot
  std::vector<double> arrival;
  std::function<void(size_t)> on_done;
  bool chat = false;

  Runner(const ClientOptions& o, const std::vector<RequestSpec>& r)
      : options(o), requests(r), records(r.size()) {}

  double now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  void arrive(size_t i) {
    if (max_concurrency && in_flight >= *max_concurrency) {
      waiting.push_back(i);
      return;
    }
    launch(i);
  }
  void launch(size_t i) {
    ++in_flight;
    std::make_shared<Session>(*this, i)->start();
  }
  void finished(size_t i) {
    --in_flight;
    if (on_done) on_done(i);
    if (!waiting.empty()) {
      const size_t next = waiting.front();
      waiting.pop_front();
      launch(next);
    }
  }
};

Session::Session(Runner& r, size_t i)
    : run_(r), index_(i), stream_(r.ioc), deadline_timer_(r.ioc), rec_(r.records[i]),
      acc_(r.records[i], r.chat) {
  // A declared Content-Length above this fails at the header, before anything is reserved;
  // a 200 stream without one is bounded event by event (SseAccumulator), a non-200 body below.
  parser_.body_limit(kMaxResponseBodyBytes);
  parser_.header_limit(64 << 10);
}

void Session::start() {
  const RequestSpec& spec = run_.requests[index_];
  rec_.prompt_len = spec.prompt_len;
  rec_.start_time = run_.now();
  rec_.client_queue_time = rec_.start_time - run_.arrival[index_];
  req_ = {http::verb::post, target(run_.options, run_.options.endpoint), 11};
  req_.set(http::field::host, host_header(run_.options));
  req_.set(http::field::content_type, "application/json");
  req_.set(http::field::accept, "text/event-stream");
  if (!run_.options.api_key.empty())
    req_.set(http::field::authorization, "Bearer " + run_.options.api_key);
  req_.body() = request_body(run_.options, spec).dump();
  req_.prepare_payload();
  // One deadline for the whole request. The timer closes the socket, which ends the pending
  // operation; every handler also checks the clock, since a server that floods data completes
  // each read at once (Beast's per-operation timeout never fires then).
  deadline_ = Clock::now() + to_duration(run_.options.request_timeout_s);
  deadline_timer_.expires_at(deadline_);
  deadline_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->finished_) return;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
  stream_.async_connect(run_.endpoints, [self = shared_from_this()](beast::error_code ec,
                                                                     const tcp::endpoint&) {
    self->on_connect(ec);
  });
}

void Session::fail(const std::string& what) {
  rec_.success = false;
  rec_.error = printable(what);
  done();
}

void Session::fail_timeout() {
  fail("timed out after " + std::to_string(run_.options.request_timeout_s) +
       " s (--request-timeout)");
}

void Session::on_connect(beast::error_code ec) {
  if (expired()) return fail_timeout();
  if (ec) return fail("cannot connect to " + run_.options.base.host + ":" +
                      run_.options.base.port + ": " + ec.message());
  // No Nagle: the header and the body go out as separate writes, and the body must not wait
  // for the server's delayed ACK (40 ms on Linux) before it leaves.
  beast::error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);
  http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code e, size_t) {
    self->on_write(e);
  });
}

void Session::on_write(beast::error_code ec) {
  if (expired()) return fail_timeout();
  if (ec) return fail("sending the request: " + ec.message());
  http::async_read_header(stream_, buffer_, parser_,
                          [self = shared_from_this()](beast::error_code e, size_t) {
                            self->on_header(e);
                          });
}

void Session::on_header(beast::error_code ec) {
  if (expired()) return fail_timeout();
  if (ec == http::error::body_limit) {  // a declared Content-Length over kMaxResponseBodyBytes
    const auto& h = parser_.get();
    const std::string declared = std::string(h[http::field::content_length]).substr(0, 24);
    if (h.result_int() != 200)
      return fail("HTTP " + std::to_string(h.result_int()) + " " + std::string(h.reason()) +
                  " (an error body of " + declared + " bytes, over the " +
                  std::to_string(kMaxErrorBodyBytes) + "-byte limit, not read)");
    return fail("HTTP 200: the response declares " + declared + " body bytes, over the " +
                std::to_string(kMaxResponseBodyBytes) + "-byte limit of a response");
  }
  if (ec) return fail("reading the response: " + ec.message());
  const unsigned status = parser_.get().result_int();
  if (status != 200) {
    // Only the start of an error body is reported: read at most kMaxErrorBodyBytes of it.
    if (parser_.content_length() && *parser_.content_length() > kMaxErrorBodyBytes)
      return fail("HTTP " + std::to_string(status) + " " + std::string(parser_.get().reason()) +
                  " (an error body of " + std::to_string(*parser_.content_length()) +
                  " bytes, over the " + std::to_string(kMaxErrorBodyBytes) +
                  "-byte limit, not read)");
    parser_.body_limit(kMaxErrorBodyBytes);
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code e, size_t) {
                       self->on_error_body(e);
                     });
    return;
  }
  // A stream without Content-Length (chunked, or until the server closes): the accumulator
  // bounds what it keeps; the deadline bounds how long it runs.
  if (!parser_.content_length()) parser_.body_limit(boost::none);
  if (parser_.is_done()) return on_read({});
  read_more();
}

void Session::read_more() {
  http::async_read_some(stream_, buffer_, parser_,
                        [self = shared_from_this()](beast::error_code e, size_t) {
                          self->on_read(e);
                        });
}

void Session::on_read(beast::error_code ec) {
  const double t = run_.now();
  std::string& body = parser_.get().body();
  if (!body.empty()) {
    try {
      acc_.feed(body, t);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    body.clear();  // the string body appends to what is there: keep only what is new
  }
  if (expired()) return fail_timeout();
  if (ec == http::error::buffer_overflow)
    return fail("reading the stream: a header or chunk line over " +
                std::to_string(kMaxBufferBytes) + " bytes");
  if (ec && ec != http::error::end_of_stream) return fail("reading the stream: " + ec.message());
  if (!ec && !parser_.is_done()) return read_more();
  if (!acc_.saw_text())
    return fail("the stream carried no text (never received a chunk to time TTFT from)");
  rec_.success = true;
  done();
}

void Session::on_error_body(beast::error_code ec) {
  if (expired() && ec) return fail_timeout();
  const auto& res = parser_.get();
  const std::string body = res.body().substr(0, 300);
  fail("HTTP " + std::to_string(res.result_int()) + " " + std::string(res.reason()) +
       (body.empty() ? "" : ": " + body) +
       (ec == http::error::body_limit
            ? " (error body cut at " + std::to_string(kMaxErrorBodyBytes) + " bytes)"
            : ""));
}

void Session::done() {
  if (finished_) return;
  finished_ = true;
  deadline_timer_.cancel();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
  run_.finished(index_);
}

}  // namespace

HttpReply http_get(const ClientOptions& o, const std::string& path, double timeout_s) {
  const std::string url = "http://" + host_header(o) + target(o, path);
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(o.base.host, o.base.port, ec);
  if (ec) throw std::runtime_error("cannot resolve " + o.base.host + ": " + ec.message());
  beast::tcp_stream stream(ioc);
  stream.expires_after(to_duration(timeout_s));
  http::request<http::empty_body> req{http::verb::get, target(o, path), 11};
  req.set(http::field::host, host_header(o));
  if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
  beast::flat_buffer buffer{size_t{1} << 20};
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBodyBytes);
  std::string error;
  stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
    if (e) {
      error = "cannot connect to " + o.base.host + ":" + o.base.port + " (" + e.message() + ")";
      return;
    }
    http::async_write(stream, req, [&](beast::error_code e2, size_t) {
      if (e2) {
        error = "cannot send GET " + url + " (" + e2.message() + ")";
        return;
      }
      http::async_read(stream, buffer, parser, [&](beast::error_code e3, size_t) {
        if (e3 == beast::error::timeout)
          error = "GET " + url + " got no HTTP reply within " + std::to_string(timeout_s) + " s";
        else if (e3 == http::error::body_limit)
          error = "GET " + url + " sent a body over the " +
                  std::to_string(kMaxResponseBodyBytes) + "-byte limit";
        else if (e3)
          error = "GET " + url + " did not get an HTTP reply (" + e3.message() + ")";
      });
    });
  });
  ioc.run();
  if (!error.empty()) throw std::runtime_error(error);
  return {static_cast<int>(parser.get().result_int()), parser.get().body()};
}

std::vector<RequestRecord> run_requests(const ClientOptions& options,
                                        const std::vector<RequestSpec>& requests,
                                        const std::vector<double>& arrival_s,
                                        std::optional<int64_t> max_concurrency,
                                        const std::function<void(size_t)>& on_done) {
  if (arrival_s.size() != requests.size())
    throw std::invalid_argument("run_requests: one arrival time per request");
  Runner run(options, requests);
  run.chat = options.endpoint.find("chat") != std::string::npos;
  run.max_concurrency = max_concurrency;
  run.arrival = arrival_s;
  run.on_done = on_done;
  tcp::resolver resolver(run.ioc);
  beast::error_code ec;
  run.endpoints = resolver.resolve(options.base.host, options.base.port, ec);
  if (ec) throw std::runtime_error("cannot resolve " + options.base.host + ": " + ec.message());
  std::vector<std::unique_ptr<net::steady_timer>> timers;
  run.t0 = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!(arrival_s[i] > 0)) {
      net::post(run.ioc, [&run, i] { run.arrive(i); });
      continue;
    }
    auto& t = timers.emplace_back(std::make_unique<net::steady_timer>(run.ioc));
    t->expires_at(run.t0 + to_duration(arrival_s[i]));
    t->async_wait([&run, i](beast::error_code) { run.arrive(i); });
  }
  run.ioc.run();
  return std::move(run.records);
}

}  // namespace octet::bench
