// HTTP/1.1 pipelining against the real `octet serve` on stories260K over loopback: many requests
// in one write behind a running completion are answered in order, one response each, however
// many bytes they take (the server stops reading while its buffer is full, and never drops the
// connection); a pipeline is cut after a Connection: close request, and by SIGTERM after a 503
// that closes it cleanly. Helpers in serve_process.h.
#include <catch2/catch.hpp>

#include "serve_process.h"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace {

namespace http = boost::beast::http;

/// One parsed response of a pipeline.
struct Response {
  int status = 0;
  std::string request_id;  // the X-Request-Id the request sent, echoed
  bool chunked = false;
  bool keep_alive = true;  // no Connection: close
  std::string body;  // de-chunked
};

/// The complete responses at the front of `bytes`, in order (an incomplete last one is left
/// out; a malformed one fails the test).
std::vector<Response> parse_responses(const std::string& bytes) {
  std::vector<Response> out;
  size_t at = 0;
  while (at < bytes.size()) {
    http::response_parser<http::string_body> p;
    p.eager(true);
    size_t used = 0;
    while (!p.is_done()) {
      boost::beast::error_code ec;
      const size_t n =
          p.put(boost::asio::buffer(bytes.data() + at + used, bytes.size() - at - used), ec);
      used += n;
      if (ec == http::error::need_more) {
        if (n == 0 || at + used == bytes.size()) return out;  // incomplete
        continue;
      }
      INFO("response " << out.size() << " at byte " << at << ": " << ec.message());
      REQUIRE(!ec);
    }
    const auto& m = p.get();
    out.push_back({static_cast<int>(m.result_int()), std::string(m["X-Request-Id"]),
                   p.chunked(), m.keep_alive(), m.body()});
    at += used;
  }
  return out;
}

/// A completion request with X-Request-Id `id` (ignore_eos: exactly max_tokens tokens).
std::string completion(const std::string& id, int max_tokens, bool stream, bool close = false) {
  const std::string body = nlohmann::json{{"prompt", "Once upon a time"},
                                          {"max_tokens", max_tokens},
                                          {"ignore_eos", true},
                                          {"stream", stream}}
                               .dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: t\r\nX-Request-Id: " + id + "\r\n" +
         (close ? "Connection: close\r\n" : "") +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

/// Request 0 ("pipe-0") streams `stream_tokens` tokens; requests 1..n-1 ("pipe-<i>") are
/// completions of `max_tokens` tokens, request `close_at` (if any) with Connection: close.
std::string pipeline_of(int n, int stream_tokens, int max_tokens, int close_at = -1) {
  std::string out = completion("pipe-0", stream_tokens, /*stream=*/true);
  for (int i = 1; i < n; ++i)
    out += completion("pipe-" + std::to_string(i), max_tokens, false, i == close_at);
  return out;
}

/// Sends `data` from a thread (the server may stop reading until this side reads its answers)
/// while this thread reads until the server closes, the receive timeout passes, or `enough`
/// complete responses have arrived (0: no such stop).
Received send_and_read(int fd, const std::string& data, size_t enough = 0) {
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
    sent = true;
  });
  Received r;
  std::array<char, 65536> buf{};
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) {
      r.closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
    r.bytes.append(buf.data(), static_cast<size_t>(n));
    if (enough && parse_responses(r.bytes).size() >= enough) break;
  }
  sender.join();
  CHECK(sent);
  return r;
}

/// Checks that `got` answers requests 0..count-1 of a pipeline_of, in order: request 0 a
/// streamed completion, every other one a completion of `max_tokens` tokens.
void check_in_order(const std::vector<Response>& got, int count, int max_tokens) {
  REQUIRE(got.size() == static_cast<size_t>(count));
  for (int n = 0; n < count; ++n) {
    const Response& r = got[static_cast<size_t>(n)];
    INFO("response " << n << ": " << r.body.substr(0, 300));
    CHECK(r.status == 200);
    CHECK(r.request_id == "pipe-" + std::to_string(n));
    if (n == 0) {
      CHECK(r.chunked);
      CHECK(r.body.rfind("data: ", 0) == 0);
      CHECK(r.body.size() >= 14);
      CHECK(r.body.substr(r.body.size() - 14) == "data: [DONE]\n\n");
      continue;
    }
    const auto j = nlohmann::json::parse(r.body);
    CHECK(j.at("object") == "text_completion");
    CHECK(j.at("choices").size() == 1);
    CHECK(j.at("usage").at("completion_tokens") == max_tokens);
  }
}

/// The last 4000 characters of the server's log (for a failure's message).
std::string log_tail(const ServeProcess& server) {
  const std::string log = server.log();
  return log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
}

}  // namespace

TEST_CASE("pipelined requests behind a stream are all answered, in order", "[http][serve]") {
  ServeProcess server({});
  // Request 0 streams 200 tokens; behind it 200 completions (~41 KB, far more than the server
  // buffers at once) in the same write, the last one closing the connection.
  const int n = 201;
  const std::string pipeline = pipeline_of(n, 200, 4, /*close_at=*/n - 1);
  REQUIRE(pipeline.size() > 32 * 1024);
  const int fd = connect_to(server.port(), 30);
  const Received r = send_and_read(fd, pipeline);
  close(fd);
  INFO(log_tail(server));
  CHECK(r.closed);
  check_in_order(parse_responses(r.bytes), n, 4);
}

TEST_CASE("a pipeline ending in a partial request is answered once the request completes",
          "[http][serve]") {
  ServeProcess server({});
  // One write: a stream, 99 completions and the first half of the head of the 101st.
  const int n = 100;
  const std::string pipeline = pipeline_of(n, 100, 2);
  const std::string last = completion("pipe-" + std::to_string(n), 2, false, /*close=*/true);
  const size_t cut = last.find("\r\n\r\n") / 2;
  const int fd = connect_to(server.port(), 30);
  const Received first = send_and_read(fd, pipeline + last.substr(0, cut), n);
  INFO(log_tail(server));
  CHECK_FALSE(first.closed);
  check_in_order(parse_responses(first.bytes), n, 2);
  // The rest of the last request: its answer, then the close.
  const Received rest = send_and_read(fd, last.substr(cut));
  close(fd);
  CHECK(rest.closed);
  check_in_order(parse_responses(first.bytes + rest.bytes), n + 1, 2);
}

TEST_CASE("1000 pipelined completions in one write are all answered", "[http][serve]") {
  ServeProcess server({});
  const int n = 1000;
  const std::string pipeline = pipeline_of(n, 50, 1, /*close_at=*/n - 1);
  const int fd = connect_to(server.port(), 30);
  const Received r = send_and_read(fd, pipeline);
  close(fd);
  INFO(log_tail(server));
  CHECK(r.closed);
  check_in_order(parse_responses(r.bytes), n, 1);
}

TEST_CASE("a pipeline is cut after its Connection: close request", "[http][serve]") {
  ServeProcess server({});
  // Request 5 closes the connection: the requests behind it are never answered (or run), with
  // a few of them (the server still reading) or many (the server paused) in the same write.
  for (const int n : {30, 200}) {
    const int fd = connect_to(server.port(), 30);
    const Received r = send_and_read(fd, pipeline_of(n, 100, 3, /*close_at=*/5));
    close(fd);
    INFO(n << " requests; " << log_tail(server));
    CHECK(r.closed);
    check_in_order(parse_responses(r.bytes), 6, 3);
    CHECK(server.log().find("[pipe-5]") != std::string::npos);  // access-log lines by id
    CHECK(server.log().find("[pipe-6]") == std::string::npos);
  }
}

TEST_CASE("a request over the limits in a pipeline gets 431 or 413 after those before it",
          "[http][serve]") {
  ServeProcess server({"--max-header-bytes", "4096", "--max-body-bytes", "2000"});
  const std::string big_head =
      "GET /health HTTP/1.1\r\nHost: t\r\nX-Pad: " + std::string(6000, 'a') + "\r\n\r\n";
  const std::string big_body = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                               "application/json\r\nContent-Length: 3000\r\n\r\n" +
                               std::string(3000, ' ');
  for (const auto& [over, status] : {std::pair{big_head, 431}, std::pair{big_body, 413}}) {
    const int n = 60;  // ~12 KB before the request over the limits: the server pauses first
    const int fd = connect_to(server.port(), 30);
    const Received r =
        send_and_read(fd, pipeline_of(n, 100, 2) + over + completion("pipe-x", 2, false));
    close(fd);
    INFO(status << "; " << log_tail(server));
    CHECK(r.closed);
    std::vector<Response> got = parse_responses(r.bytes);
    REQUIRE(got.size() == static_cast<size_t>(n + 1));
    CHECK(got.back().status == status);
    got.pop_back();
    check_in_order(got, n, 2);
  }
}

TEST_CASE("SIGTERM during a pipeline: the answers sent arrive, the last a 503 with close",
          "[http][serve]") {
  ServeProcess server({});
  // 2000 one-token completions in one write (never all answered before the signal); SIGTERM
  // once 20 have come back. The server finishes the request it is on, answers the next 503
  // with Connection: close, reads and drops the rest, and closes cleanly (no reset, which
  // would discard answers the client has not read yet).
  const int n = 2000;
  const std::string pipeline = pipeline_of(n, 20, 1);
  const int fd = connect_to(server.port(), 30);
  std::thread sender([&] {
    size_t off = 0;
    while (off < pipeline.size()) {
      const ssize_t k = send(fd, pipeline.data() + off, pipeline.size() - off, MSG_NOSIGNAL);
      if (k <= 0) return;  // the server closed: the rest is never read
      off += static_cast<size_t>(k);
    }
  });
  std::string bytes;
  std::array<char, 65536> buf{};
  bool signalled = false;
  int end_errno = 0;
  for (;;) {
    const ssize_t k = recv(fd, buf.data(), buf.size(), 0);
    if (k <= 0) {
      end_errno = k == 0 ? 0 : errno;
      break;
    }
    bytes.append(buf.data(), static_cast<size_t>(k));
    if (!signalled && parse_responses(bytes).size() >= 20) {
      server.signal(SIGTERM);
      signalled = true;
    }
  }
  shutdown(fd, SHUT_RDWR);
  sender.join();
  close(fd);
  const int code = server.wait_exit(30);
  INFO(log_tail(server));
  REQUIRE(signalled);
  CHECK(end_errno == 0);  // a clean close, not ECONNRESET (or a timeout)
  const std::vector<Response> got = parse_responses(bytes);
  REQUIRE(got.size() >= 21);
  CHECK(got.size() < static_cast<size_t>(n));
  // The answers in order: 200s (the requests taken before the signal), then 503s (a request
  // whose head was read just before it may get one with keep-alive), the last one closing.
  size_t ok = 0;
  while (ok < got.size() && got[ok].status == 200) ++ok;
  CHECK(ok >= 20);
  check_in_order(std::vector<Response>(got.begin(), got.begin() + static_cast<long>(ok)),
                 static_cast<int>(ok), 1);
  for (size_t i = ok; i < got.size(); ++i) {
    INFO("response " << i << ": " << got[i].body);
    CHECK(got[i].status == 503);
    CHECK(got[i].request_id == "pipe-" + std::to_string(i));
    CHECK(got[i].body.find("shutting down") != std::string::npos);
  }
  CHECK(got.size() - ok <= 2);
  CHECK_FALSE(got.back().keep_alive);
  CHECK(code == 0);
}

TEST_CASE("empty lines before a request line are skipped (RFC 9112 2.2)", "[http][serve]") {
  ServeProcess server({});
  // A CRLF before the first request, a stray CRLF after a body (older clients send one), and
  // an LF and CRLFs before the last; all in one write, then the same split across writes.
  const std::string data = "\r\n" + completion("pipe-0", 2, false) + "\r\n" +
                           completion("pipe-1", 2, false) + "\n\r\n\r\n" +
                           completion("pipe-2", 2, false, /*close=*/true);
  for (bool split : {false, true}) {
    INFO((split ? "split" : "one write"));
    const int fd = connect_to(server.port(), 30);
    Received r;
    if (!split) {
      r = send_and_read(fd, data);
    } else {
      REQUIRE(send(fd, "\r\n", 2, MSG_NOSIGNAL) == 2);  // alone: the connection stays idle
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      r = send_and_read(fd, data.substr(2));
    }
    close(fd);
    INFO(log_tail(server));
    CHECK(r.closed);
    const std::vector<Response> got = parse_responses(r.bytes);
    REQUIRE(got.size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(got[static_cast<size_t>(i)].status == 200);
      CHECK(got[static_cast<size_t>(i)].request_id == "pipe-" + std::to_string(i));
    }
  }
}
