#pragma once
// The HTTP side of `octet bench serve`: streamed OpenAI-style requests (/v1/completions or
// /v1/chat/completions with stream_options.include_usage) over Boost.Beast, every connection on
// one I/O thread, sent at given arrival times with an optional concurrency limit. Each request
// yields a RequestRecord with vLLM's timings (vllm/benchmarks/lib/endpoint_request_func.py):
// TTFT at the first SSE chunk whose text is not empty, one ITL per later text chunk, E2EL at
// the last text chunk. A request that fails (refused, timed out, non-200, a stream without
// text, a bound below exceeded, usage that is not a token count) is recorded as failed with its
// error; it never stops the run, whatever the server sends.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"

namespace octet::bench {

// Per-request bounds of the client (a hostile or broken server costs one failed request, never
// the benchmark's memory): beyond one of them the request fails with an error naming it.
inline constexpr size_t kMaxResponseBodyBytes = size_t{16} << 20;  // a body with Content-Length
inline constexpr size_t kMaxErrorBodyBytes = size_t{64} << 10;     // a non-200 reply's body
inline constexpr size_t kMaxSseEventBytes = size_t{16} << 20;      // one SSE event
inline constexpr size_t kMaxStreamTextBytes = size_t{16} << 20;    // generated text
inline constexpr size_t kMaxStreamTextChunks = size_t{1} << 22;    // text chunks (ITL entries)
inline constexpr int64_t kMaxUsageTokens = int64_t{1} << 40;       // usage.*_tokens
inline constexpr int kMaxJsonDepth = 64;                           // nesting of a reply's JSON
inline constexpr double kMaxWaitSeconds = 365.0 * 24 * 3600;       // timers are clamped to it

/// JSON text parsed with a nesting limit of kMaxJsonDepth; a discarded value (is_discarded())
/// for malformed or too deeply nested text (no exception).
nlohmann::json parse_reply_json(const std::string& text);

/// http://HOST[:PORT][/PREFIX] split up. Only plain http is supported.
struct BaseUrl {
  std::string host;
  std::string port = "80";
  std::string prefix;  // path before the endpoint, "" or "/x" (no trailing '/')
};

/// Parses a --base-url. Throws std::invalid_argument for anything but http://host[:port][/path]
/// (https, a missing host, a port that is not 1..65535).
BaseUrl parse_base_url(const std::string& url);

/// One request of the workload.
struct RequestSpec {
  std::string prompt;
  int64_t prompt_len = 0;   // tokens, as the dataset counted them
  int64_t max_tokens = 0;   // expected output length
};

struct ClientOptions {
  BaseUrl base;
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model;                         // "model" field of every request
  std::string api_key;                       // "" = no Authorization header
  bool ignore_eos = false;
  std::optional<double> temperature;         // absent = the server's default
  double request_timeout_s = 600;            // whole request, connect to the end of the stream
};

/// Result of a plain GET (connection and HTTP errors throw).
struct HttpReply {
  int status = 0;
  std::string body;
};

/// GET base.prefix + path. Throws std::runtime_error naming the URL when the server cannot be
/// reached, the connection fails or the reply is not HTTP, within timeout_s.
HttpReply http_get(const ClientOptions& options, const std::string& path, double timeout_s);

/// Sends requests[i] at arrival_s[i] seconds after the start (non-decreasing; clamped to
/// [0, kMaxWaitSeconds]), at most max_concurrency in flight (absent = no limit), and waits for
/// all. Each request has one deadline, options.request_timeout_s after it is sent, covering
/// connect, headers, body and the whole SSE stream. on_done(i) runs on the I/O thread after
/// each. Record times are seconds since the start of this call.
std::vector<RequestRecord> run_requests(const ClientOptions& options,
                                        const std::vector<RequestSpec>& requests,
                                        const std::vector<double>& arrival_s,
                                        std::optional<int64_t> max_concurrency,
                                        const std::function<void(size_t)>& on_done = {});

/// The JSON body of one streamed request (exposed for the tests).
nlohmann::json request_body(const ClientOptions& options, const RequestSpec& request);

/// Parser of one response's Server-Sent Events. Feed body bytes with their arrival time; it
/// updates the record (ttft, itl, latency, generated_text, output_tokens, prompt_len). Linear in
/// the bytes fed; holds at most one event (kMaxSseEventBytes) besides the record.
class SseAccumulator {
 public:
  SseAccumulator(RequestRecord& record, bool chat) : record_(record), chat_(chat) {}
  /// Bytes of the body that arrived at `now_s` (seconds, same clock as record.start_time).
  /// Throws std::runtime_error for an event whose data is not JSON (or nests deeper than
  /// kMaxJsonDepth), an event over kMaxSseEventBytes, text over kMaxStreamTextBytes or
  /// kMaxStreamTextChunks, and a usage.prompt_tokens / completion_tokens that is not an integer
  /// in [0, kMaxUsageTokens].
  void feed(const std::string& bytes, double now_s);
  bool saw_text() const { return saw_text_; }
  bool saw_done() const { return saw_done_; }

 private:
  void event(const std::string& data, double now_s);
  RequestRecord& record_;
  bool chat_;
  std::string buffer_;  // the unfinished event
  size_t scanned_ = 0;  // bytes of buffer_ already searched for the end of an event
  bool saw_text_ = false, saw_done_ = false;
  double last_s_ = 0;
};

}  // namespace octet::bench
