// Multi-node tensor parallelism on the CPU with the real `octet` binary: two processes on
// 127.0.0.1 (node 0 and node 1, one rank each, TCP collectives and step broadcast) against the
// single-process --tensor-parallel-size 2 run (two rank threads, the in-process communicator)
// on stories260K (8 heads, 4 KV heads: 4 and 2 per rank). Their sums are the same rank-order
// expression, so the outputs must be equal bit for bit: greedy and seeded sampled token ids
// from `generate`, and served /v1/completions text and logprobs. Then the life cycle: node 1
// exits 0 when node 0 shuts down, exits 1 naming node 0 when node 0 is killed, node 0 fails
// the request in flight and exits 1 when node 1 is killed, and a flag that differs between
// the nodes fails both at start-up.
#include <nlohmann/json.hpp>

#include "serve_process.h"

namespace {

using nlohmann::json;

/// One `octet` child process, its stdout and stderr in a log file.
class Node {
 public:
  explicit Node(const std::vector<std::string>& args) {
    static int counter = 0;
    log_ = "/tmp/octet_multinode_test_" + std::to_string(getpid()) + "_" +
           std::to_string(counter++) + ".log";
    std::vector<std::string> argv_s = {octet_binary()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid_ = spawn_logged(argv_s, log_);
  }
  ~Node() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(log_.c_str());
  }
  std::string log() const { return slurp(log_); }
  /// The exit code once the process ends within timeout_s (128 + signal when killed by one);
  /// -1 when it is still running then (it is killed).
  int exit_code(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    while (pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(20ms);
    }
    return code_;
  }
  void signal(int sig) const {
    if (pid_ > 0) kill(pid_, sig);
  }
  /// Waits until the log contains `text` (true) or the process ends or timeout_s passes.
  bool wait_log(const std::string& text, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (log().find(text) != std::string::npos) return true;
      if (pid_ < 0) return false;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return log().find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  /// The HTTP port of a serving node 0 (from its "listening on" line), once ready.
  int serve_port(double timeout_s) {
    if (!wait_log("ready, serving", timeout_s)) return 0;
    std::smatch m;
    const std::string text = log();
    if (!std::regex_search(text, m, std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)")))
      return 0;
    return std::stoi(m[1]);
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int code_ = -1;
};

std::vector<std::string> node_flags(int base_port, int node_rank) {
  return {"--device", "cpu", "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank",
          std::to_string(node_rank), "--master-addr", "127.0.0.1", "--master-port",
          std::to_string(base_port)};
}

std::vector<std::string> generate_args(double temperature, int seed) {
  return {"generate", "--model", kStories, "--prompt", "Once upon a time", "--max-tokens", "40",
          "--temperature", std::to_string(temperature), "--seed", std::to_string(seed),
          "--json"};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Node 1 then node 0 of a two-node `octet serve` on stories260K (node 0 on a free HTTP port),
/// over a free port triple, once node 0 serves (or has given up).
struct ServingNodes {
  const int port = free_port_triple(37, 101);
  Node node1{concat({"serve", "--model", kStories}, node_flags(port, 1))};
  Node node0{concat({"serve", "--model", kStories, "--host", "127.0.0.1", "--port", "0"},
                    node_flags(port, 0))};
  const int http = node0.serve_port(40);  // 0 when node 0 did not come up serving
};

/// The last line of a log that parses as a JSON object with token_ids (generate --json).
json generate_json(const std::string& log) {
  std::istringstream in(log);
  json found;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("token_ids")) found = j;
  }
  return found;
}

int status_code(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

/// A non-streamed /v1/completions answer's choices (text, logprobs, finish_reason), or null.
json completion_choices(int port, const std::string& body) {
  const Received r = roundtrip(port, post("/v1/completions", body), 30);
  if (status_code(r.bytes) != 200) return json();
  const json j = json::parse(r.bytes.substr(r.bytes.find("\r\n\r\n") + 4), nullptr, false);
  return j.is_object() ? j.value("choices", json()) : json();
}

const std::string kGreedy =
    R"({"prompt":"Once upon a time","max_tokens":24,"temperature":0,"logprobs":3})";
const std::string kSampled =
    R"({"prompt":"Lily and Tom","max_tokens":24,"temperature":1.0,"seed":11,"logprobs":2})";

}  // namespace

TEST_CASE("multi-node generate equals the single-process tensor-parallel run bit for bit",
          "[multinode]") {
  for (auto [temperature, seed] : {std::pair{0.0, 0}, std::pair{1.0, 7}}) {
    INFO("temperature " << temperature << ", seed " << seed);
    Node single(concat(generate_args(temperature, seed),
                       {"--device", "cpu", "--tensor-parallel-size", "2"}));
    REQUIRE(single.exit_code(30) == 0);
    const json expect = generate_json(single.log());
    REQUIRE(expect.contains("token_ids"));
    REQUIRE(expect["token_ids"].size() == 40);

    const int port = free_port_triple(37, 101);
    Node node1(concat(generate_args(temperature, seed), node_flags(port, 1)));
    Node node0(concat(generate_args(temperature, seed), node_flags(port, 0)));
    const int code0 = node0.exit_code(30);
    INFO("node 0:\n" << node0.log() << "\nnode 1:\n" << node1.log());
    REQUIRE(code0 == 0);
    const json got = generate_json(node0.log());
    CHECK(got["token_ids"] == expect["token_ids"]);
    CHECK(got["text"] == expect["text"]);
    CHECK(got["prompt_token_ids"] == expect["prompt_token_ids"]);
    // Node 1 prints no completion and exits 0 on node 0's shutdown message (1 on a lost
    // node 0: the next test cases).
    CHECK(node1.exit_code(10) == 0);
    CHECK(generate_json(node1.log()).is_null());
  }
}

TEST_CASE("multi-node serve answers as single-node tensor parallelism, node 1 exits with "
          "node 0", "[multinode]") {
  json expect_greedy, expect_sampled;
  {
    ServeProcess single({"--device", "cpu", "--tensor-parallel-size", "2"});
    expect_greedy = completion_choices(single.port(), kGreedy);
    expect_sampled = completion_choices(single.port(), kSampled);
  }
  REQUIRE(expect_greedy.is_array());
  REQUIRE(expect_sampled.is_array());
  REQUIRE(expect_greedy[0].contains("logprobs"));

  ServingNodes nodes;
  Node& node0 = nodes.node0;
  Node& node1 = nodes.node1;
  const int http = nodes.http;
  INFO("node 0:\n" << node0.log() << "\nnode 1:\n" << node1.log());
  REQUIRE(http > 0);
  CHECK(completion_choices(http, kGreedy) == expect_greedy);  // text and logprobs exactly
  CHECK(completion_choices(http, kSampled) == expect_sampled);
  // SIGTERM: node 0 drains and exits 0; its shutdown message ends node 1 with 0.
  node0.signal(SIGTERM);
  CHECK(node0.exit_code(20) == 0);
  CHECK(node1.exit_code(10) == 0);
}

TEST_CASE("multi-node serve: a killed node 1 fails node 0's request and node 0 exits 1",
          "[multinode]") {
  ServingNodes nodes;
  Node& node0 = nodes.node0;
  Node& node1 = nodes.node1;
  const int http = nodes.http;
  INFO("node 0:\n" << node0.log() << "\nnode 1:\n" << node1.log());
  REQUIRE(http > 0);
  REQUIRE(completion_choices(http, kGreedy).is_array());
  node1.signal(SIGKILL);
  CHECK(node1.exit_code(10) == 128 + SIGKILL);
  // The next step finds the peer gone: this request fails (no 200, no hang), then node 0
  // exits 1 with the reason in its log.
  const Received r = roundtrip(http, post("/v1/completions", kGreedy), 20);
  CHECK(r.closed);
  CHECK(status_code(r.bytes) != 200);
  CHECK(node0.exit_code(20) == 1);
  const std::string log = node0.log();
  CHECK(log.find("lost its connection to rank 1") != std::string::npos);
  CHECK(log.find("a node was lost") != std::string::npos);
}

TEST_CASE("multi-node: a killed node 0 ends node 1 with exit code 1 and the reason",
          "[multinode]") {
  ServingNodes nodes;
  Node& node0 = nodes.node0;
  Node& node1 = nodes.node1;
  REQUIRE(nodes.http > 0);
  REQUIRE(node1.wait_log("following node 0", 10));
  node0.signal(SIGKILL);
  INFO("node 1:\n" << node1.log());
  CHECK(node1.exit_code(10) == 1);
  CHECK(node1.log().find("lost its connection to rank 0") != std::string::npos);
}

TEST_CASE("multi-node: a flag that differs between the nodes fails both at start-up",
          "[multinode]") {
  const int port = free_port_triple(37, 101);
  Node node1(concat(concat(generate_args(0, 0), node_flags(port, 1)), {"--max-num-seqs", "8"}));
  Node node0(concat(generate_args(0, 0), node_flags(port, 0)));
  INFO("node 0:\n" << node0.log() << "\nnode 1:\n" << node1.log());
  CHECK(node0.exit_code(30) == 2);
  CHECK(node1.exit_code(10) == 2);
  for (const std::string& log : {node0.log(), node1.log()})
    CHECK(log.find("node 1: the flags differ from node 0's: max_num_seqs=8 here") !=
          std::string::npos);
}
