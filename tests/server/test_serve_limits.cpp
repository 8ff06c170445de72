// `octet serve` on stories260K over loopback, for the limits found after the first hardening
// round (issue 9): a response larger than a client reads within --read-timeout is sent whole
// (the write deadline is per 1 MiB slice, F-write), and the logprob budget answers 400 at the
// HTTP edge before any engine work (F2). Helpers as in test_http_server.cpp.
#include <catch2/catch.hpp>

#include "serve_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

using namespace std::chrono_literals;

namespace {

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return -1;
  return std::stoi(response.substr(9, 3));
}

}  // namespace

TEST_CASE("a response larger than a client reads within --read-timeout is sent whole",
          "[http][serve][limits]") {
  ServeProcess server({"--read-timeout", "1"});
  // /detokenize of 2.5M token ids (a 10 MB body, within --max-body-bytes): several MB of text,
  // more than the kernel buffers (4 MB) take in at once. (/tokenize is bounded by the context.)
  std::vector<int> ids;
  ids.reserve(2'500'000);
  for (int i = 0; i < 2'500'000; ++i) ids.push_back(259 + i % 253);
  const std::string body = nlohmann::json{{"tokens", ids}}.dump();
  const int fd = connect_to(server.port(), 60);
  const int small = 64 << 10;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  send_all(fd, post("/detokenize", body));
  // Read at ~2 MB/s: each 1 MiB slice within the 1 s deadline, the whole body over seconds.
  std::string got;
  std::array<char, 65536> buf{};
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    size_t chunk = 0;
    while (chunk < (256u << 10)) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got.append(buf.data(), static_cast<size_t>(n));
      chunk += static_cast<size_t>(n);
    }
    if (chunk == 0) break;
    std::this_thread::sleep_for(125ms);
  }
  close(fd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(status_of(got) == 200);
  const size_t head_end = got.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  const std::regex length_re("Content-Length: ([0-9]+)", std::regex::icase);
  std::smatch m;
  const std::string head = got.substr(0, head_end);
  REQUIRE(std::regex_search(head, m, length_re));
  const size_t promised = std::stoull(m[1]);
  INFO("read " << got.size() - head_end - 4 << " of " << promised << " body bytes in " << secs
               << " s");
  // The point of the test: reading took well over --read-timeout (twice it; ~22 slices of
  // 256 KiB 125 ms apart take ~2.9 s, so a bound of 3 s failed on a fast reader).
  REQUIRE(secs > 2.0);
  CHECK(promised > (5u << 20));
  CHECK(got.size() - head_end - 4 == promised);
  const auto j = nlohmann::json::parse(got.substr(head_end + 4));
  CHECK(j["prompt"].get<std::string>().size() > (5u << 20));
}

TEST_CASE("echo + logprobs + large n is a 400 before any engine work", "[http][serve][limits]") {
  ServeProcess server({});
  // 400 prompt tokens (stories260K's context is 512) echoed with logprobs 20 for n = 128:
  // 128 x 401 x 21 = 1,077,888 entries, over the 1,000,000 budget.
  nlohmann::json ids = nlohmann::json::array();
  for (int i = 0; i < 400; ++i) ids.push_back(i % 200 + 10);
  nlohmann::json req{{"prompt", ids}, {"max_tokens", 1}, {"n", 128}, {"logprobs", 20},
                     {"echo", true}};
  const auto t0 = std::chrono::steady_clock::now();
  const Received big = roundtrip(server.port(), post("/v1/completions", req.dump()), 60);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(big.bytes.substr(0, 600));
  CHECK(status_of(big.bytes) == 400);
  CHECK(big.bytes.find("\"param\":\"logprobs\"") != std::string::npos);
  CHECK(big.bytes.find("1000000") != std::string::npos);
  CHECK(secs < 5.0);
  // One choice of the same prompt (8,421 entries) works, echoed logprobs included.
  req["n"] = 1;
  const Received one = roundtrip(server.port(), post("/v1/completions", req.dump()), 60);
  REQUIRE(status_of(one.bytes) == 200);
  const auto j = nlohmann::json::parse(one.bytes.substr(one.bytes.find("\r\n\r\n") + 4));
  CHECK(j["choices"][0]["logprobs"]["tokens"].size() == 401);
  // A dict keyed by token text: tokens with the same text share a key, so up to 20.
  CHECK(j["choices"][0]["logprobs"]["top_logprobs"][5].size() >= 10);
}

TEST_CASE("with n > 1 every choice gets the prompt's logprobs (computed once)",
          "[http][serve][limits]") {
  ServeProcess server({});
  const auto body_of = [](const Received& r) {
    REQUIRE(status_of(r.bytes) == 200);
    return nlohmann::json::parse(r.bytes.substr(r.bytes.find("\r\n\r\n") + 4));
  };
  nlohmann::json req{{"prompt", "Once upon a time there was a little cat"},
                     {"max_tokens", 3},
                     {"logprobs", 2},
                     {"echo", true},
                     {"prompt_logprobs", 3},
                     {"temperature", 0}};
  const auto one = body_of(roundtrip(server.port(), post("/v1/completions", req.dump()), 60));
  req["n"] = 4;
  for (bool stream : {false, true}) {
    if (stream) {
      // prompt_logprobs is not available when streaming (vLLM); echo's logprobs are.
      req.erase("prompt_logprobs");
      req["stream"] = true;
      const Received r = roundtrip(server.port(), post("/v1/completions", req.dump()), 60);
      REQUIRE(status_of(r.bytes) == 200);
      // Every choice's first chunk carries the echoed prompt tokens with their logprobs.
      const auto& want = one["choices"][0]["logprobs"];
      const size_t n_prompt = want["tokens"].size() - 3;
      std::vector<int> seen(4, 0);
      std::istringstream lines(r.bytes.substr(r.bytes.find("\r\n\r\n") + 4));
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("data: {", 0) != 0) continue;
        const auto chunk = nlohmann::json::parse(line.substr(6));
        const auto& c = chunk["choices"][0];
        const int idx = c["index"].get<int>();
        if (seen[idx]++ > 0 || c["logprobs"].is_null()) continue;
        INFO("choice " << idx);
        REQUIRE(c["logprobs"]["tokens"].size() >= n_prompt);
        for (size_t k = 1; k < n_prompt; ++k)
          CHECK(c["logprobs"]["token_logprobs"][k] == want["token_logprobs"][k]);
      }
      for (int s : seen) CHECK(s > 0);
      continue;
    }
    const auto four = body_of(roundtrip(server.port(), post("/v1/completions", req.dump()), 60));
    REQUIRE(four["choices"].size() == 4);
    for (const auto& c : four["choices"]) {
      INFO(c.dump().substr(0, 400));
      CHECK(c["prompt_logprobs"] == one["choices"][0]["prompt_logprobs"]);
      CHECK(!c["prompt_logprobs"].is_null());
      CHECK(c["logprobs"]["token_logprobs"] == one["choices"][0]["logprobs"]["token_logprobs"]);
      CHECK(c["logprobs"]["tokens"] == one["choices"][0]["logprobs"]["tokens"]);
    }
  }
}
