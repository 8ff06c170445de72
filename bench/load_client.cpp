#include "bench/load_client.h"

#include <chrono>
#include <deque>
#include <memory>
#include <regex>
#include <stdexcept>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace octet::bench {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

BaseUrl parse_base_url(const std::string& url) {
  static const std::regex re(R"(^http://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:([0-9]+))?(/.*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, re))
    throw std::invalid_argument("--base-url '" + url + "' is not http://HOST[:PORT][/PATH]");
  BaseUrl b;
  b.host = m[1];
  if (b.host.front() == '[') b.host = b.host.substr(1, b.host.size() - 2);
  if (m[3].matched) {
    const std::string p = m[3];
    if (p.size() > 5 || std::stoi(p) < 1 || std::stoi(p) > 65535)
      throw std::invalid_argument("--base-url '" + url + "': port must be 1..65535");
    b.port = p;
  }
  b.prefix = m[4].matched ? std::string(m[4]) : "";
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

void SseAccumulator::feed(const std::string& bytes, double now_s) {
  buffer_ += bytes;
  // Events end with a blank line; servers use "\n\n" (or "\r\n\r\n").
  for (;;) {
    size_t end = buffer_.find("\n\n");
    size_t sep = 2;
    const size_t crlf = buffer_.find("\r\n\r\n");
    if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) end = crlf, sep = 4;
    if (end == std::string::npos) break;
    std::string ev = buffer_.substr(0, end);
    buffer_.erase(0, end + sep);
    // Join the event's data lines; skip comments (":" pings) and other fields.
    std::string data;
    size_t pos = 0;
    while (pos <= ev.size()) {
      size_t nl = ev.find('\n', pos);
      if (nl == std::string::npos) nl = ev.size();
      std::string line = ev.substr(pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        std::string v = line.substr(5);
        if (!v.empty() && v.front() == ' ') v.erase(0, 1);
        data += v;
      }
      pos = nl + 1;
    }
    if (!data.empty()) event(data, now_s);
  }
}

void SseAccumulator::event(const std::string& data, double now_s) {
  if (data == "[DONE]") {
    saw_done_ = true;
    return;
  }
  nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error("an SSE event is not JSON: '" + data.substr(0, 120) + "'");
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer())
      record_.output_tokens = c->get<int64_t>();
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer())
      record_.prompt_len = p->get<int64_t>();
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) return;
  const nlohmann::json& c = (*choices)[0];
  const nlohmann::json* text = nullptr;
  if (chat_) {
    if (auto d = c.find("delta"); d != c.end() && d->is_object())
      if (auto t = d->find("content"); t != d->end()) text = &*t;
  } else if (auto t = c.find("text"); t != c.end()) {
    text = &*t;
  }
  if (!text || !text->is_string() || text->get_ref<const std::string&>().empty()) return;
  if (!saw_text_) {
    record_.ttft = now_s - record_.start_time;
    saw_text_ = true;
  } else {
    record_.itl.push_back(now_s - last_s_);
  }
  last_s_ = now_s;
  record_.latency = now_s - record_.start_time;
  record_.generated_text += text->get_ref<const std::string&>();
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
  void fail(const std::string& what);
  void on_connect(beast::error_code ec);
  void on_write(beast::error_code ec);
  void on_header(beast::error_code ec);
  void read_more();
  void on_read(beast::error_code ec);
  void on_error_body(beast::error_code ec);
  void done();

  Runner& run_;
  size_t index_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
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
    : run_(r), index_(i), stream_(r.ioc), rec_(r.records[i]), acc_(r.records[i], r.chat) {
  parser_.body_limit(boost::none);
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
  stream_.expires_after(std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(run_.options.request_timeout_s)));
  stream_.async_connect(run_.endpoints, [self = shared_from_this()](beast::error_code ec,
                                                                     const tcp::endpoint&) {
    self->on_connect(ec);
  });
}

void Session::fail(const std::string& what) {
  rec_.success = false;
  rec_.error = what;
  done();
}

void Session::on_connect(beast::error_code ec) {
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
  if (ec) return fail("sending the request: " + ec.message());
  http::async_read_header(stream_, buffer_, parser_,
                          [self = shared_from_this()](beast::error_code e, size_t) {
                            self->on_header(e);
                          });
}

void Session::on_header(beast::error_code ec) {
  if (ec == beast::error::timeout) return fail("timed out waiting for the response");
  if (ec) return fail("reading the response: " + ec.message());
  if (parser_.get().result_int() != 200) {
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code e, size_t) {
                       self->on_error_body(e);
                     });
    return;
  }
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
  if (ec == beast::error::timeout)
    return fail("timed out after " + std::to_string(run_.options.request_timeout_s) + " s");
  if (ec && ec != http::error::end_of_stream) return fail("reading the stream: " + ec.message());
  if (!ec && !parser_.is_done()) return read_more();
  if (!acc_.saw_text())
    return fail("the stream carried no text (never received a chunk to time TTFT from)");
  rec_.success = true;
  done();
}

void Session::on_error_body(beast::error_code) {
  const auto& res = parser_.get();
  std::string body = res.body().substr(0, 300);
  fail("HTTP " + std::to_string(res.result_int()) + " " + std::string(res.reason()) +
       (body.empty() ? "" : ": " + body));
}

void Session::done() {
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
  stream.expires_after(std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(timeout_s)));
  http::request<http::empty_body> req{http::verb::get, target(o, path), 11};
  req.set(http::field::host, host_header(o));
  if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16 << 20);
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
    if (arrival_s[i] <= 0) {
      net::post(run.ioc, [&run, i] { run.arrive(i); });
      continue;
    }
    auto& t = timers.emplace_back(std::make_unique<net::steady_timer>(run.ioc));
    t->expires_at(run.t0 + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(arrival_s[i])));
    t->async_wait([&run, i](beast::error_code) { run.arrive(i); });
  }
  run.ioc.run();
  return std::move(run.records);
}

}  // namespace octet::bench
