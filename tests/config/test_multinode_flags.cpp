// --nnodes, --node-rank, --master-addr, --master-port (config/multinode_config.h): declared once,
// visited by serve (EngineArgs), generate, perplexity and both benches right after
// --tensor-parallel-size, validated with one clear error per flag; a well-formed --nnodes > 1
// is accepted by serve and generate (the CPU: one rank per node) and refused by the commands
// that run on one node only (perplexity, the benches).
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "config/bench_config.h"
#include "config/engine_args.h"
#include "config/generate_config.h"
#include "config/multinode_config.h"

using namespace octet;

namespace {

// The option names a config's visit() declares, in order, with a tag for the field's type.
struct NameCollector {
  std::vector<std::string> names;
  template <class T>
  void operator()(T&, const char* name, const char* help) {
    REQUIRE(std::string(help).size() > 10);  // every option has a real help text
    std::string tag = std::is_same_v<T, int64_t>       ? "int:"
                      : std::is_same_v<T, std::string> ? "str:"
                                                       : "other:";
    names.push_back(tag + name);
  }
};

template <class Config>
std::vector<std::string> names_after_tp(Config& c) {
  NameCollector v;
  Config::visit(c, v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.names.size(); ++i)
    if (v.names[i] == "int:tensor_parallel_size")
      for (size_t j = i + 1; j < v.names.size() && j <= i + 4; ++j) out.push_back(v.names[j]);
  return out;
}

const std::vector<std::string> kExpected = {"int:nnodes", "int:node_rank", "str:master_addr",
                                            "int:master_port"};

std::string error_of(const MultiNodeConfig& m, const std::string& device, int64_t tp) {
  try {
    m.validate(device, tp);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("multi-node flags: the four options follow --tensor-parallel-size on every command",
          "[config]") {
  EngineArgs serve;
  GenerateConfig generate;
  PerplexityConfig perplexity;
  BenchLatencyConfig latency;
  BenchEngineConfig engine;
  CHECK(names_after_tp(serve) == kExpected);
  CHECK(names_after_tp(generate) == kExpected);
  CHECK(names_after_tp(perplexity) == kExpected);
  CHECK(names_after_tp(latency) == kExpected);
  CHECK(names_after_tp(engine) == kExpected);
}

TEST_CASE("multi-node flags: defaults are one node, node 0, 127.0.0.1:29501", "[config]") {
  const MultiNodeConfig m;
  CHECK(m.nnodes == 1);
  CHECK(m.node_rank == 0);
  CHECK(m.master_addr == "127.0.0.1");
  CHECK(m.master_port == 29501);
  CHECK(error_of(m, "cpu", 1) == "(accepted)");
  CHECK(error_of(m, "auto", 3) == "(accepted)");  // one node: CPU thread ranks as before
}

// The refusal of --nnodes > 1 by a one-node command (config/multinode_config.h), written out.
const char* const kRefusal2 =
    "--nnodes 2: this command runs on one node; multi-node tensor parallelism runs `octet "
    "serve` and `octet generate` (every node with the same flags and its --node-rank)";

TEST_CASE("multi-node flags: a well-formed multi-node start is accepted, the CPU runs one "
          "rank per node", "[config]") {
  MultiNodeConfig m;
  m.nnodes = 2;
  m.node_rank = 1;
  m.master_addr = "node0.cluster";
  m.master_port = 65533;  // node 0 listens on 65533, 65534 and 65535
  CHECK(error_of(m, "cuda", 8) == "(accepted)");
  CHECK(error_of(m, "cpu", 2) == "(accepted)");
  CHECK(error_of(m, "auto", 2) == "(accepted)");  // resolved (and checked) by the rank group
  CHECK(m.ranks_per_node(8) == 4);
  CHECK(m.step_port() == 65534);
  CHECK(m.cpu_collective_port() == 65535);
  CHECK(error_of(m, "cpu", 4) == "--device cpu with --nnodes 2 runs one rank per node: "
                                 "--tensor-parallel-size must be 2, got 4");
  m.master_port = 65534;
  CHECK(error_of(m, "cuda", 2) == "--master-port must be in [1, 65533] with --nnodes > 1 (node "
                                  "0 also listens on master_port + 1 and + 2), got 65534");
  m = MultiNodeConfig{};
  m.master_port = 65535;  // one node: no other port is used
  CHECK(error_of(m, "cuda", 8) == "(accepted)");
  CHECK(error_of(m, "cpu", 4) == "(accepted)");
  m.nnodes = 3;
  CHECK(m.ranks_per_node(6) == 2);
  CHECK_THROWS_WITH(m.require_one_node(),
                    Catch::StartsWith("--nnodes 3: this command runs on one node"));
  m.nnodes = 1;
  CHECK_NOTHROW(m.require_one_node());
}

TEST_CASE("multi-node flags: each bad value is one error naming its flag", "[config]") {
  MultiNodeConfig m;
  m.nnodes = 0;
  CHECK(error_of(m, "cuda", 1) == "--nnodes must be in [1, 64], got 0");
  m.nnodes = 65;
  CHECK(error_of(m, "cuda", 65) == "--nnodes must be in [1, 64], got 65");

  m = MultiNodeConfig{};
  m.nnodes = 2;
  m.node_rank = 2;
  CHECK(error_of(m, "cuda", 2) == "--node-rank must be in [0, --nnodes 2), got 2");
  m.node_rank = -1;
  CHECK(error_of(m, "cuda", 2) == "--node-rank must be in [0, --nnodes 2), got -1");
  m = MultiNodeConfig{};
  m.node_rank = 1;  // one node: only node 0 exists
  CHECK(error_of(m, "cpu", 1) == "--node-rank must be in [0, --nnodes 1), got 1");

  m = MultiNodeConfig{};
  m.master_addr = "";
  CHECK(error_of(m, "cpu", 1) == "--master-addr must be a host name or IP address, got ''");
  m.master_addr = "10.0.0.1 10.0.0.2";
  CHECK(error_of(m, "cpu", 1) ==
        "--master-addr must be a host name or IP address, got '10.0.0.1 10.0.0.2'");

  m = MultiNodeConfig{};
  m.master_port = 0;
  CHECK(error_of(m, "cpu", 1) == "--master-port must be in [1, 65535], got 0");
  m.master_port = 65536;
  CHECK(error_of(m, "cpu", 1) == "--master-port must be in [1, 65535], got 65536");

  m = MultiNodeConfig{};
  m.nnodes = 2;
  CHECK(error_of(m, "cuda", 3) ==
        "--tensor-parallel-size 3 must be a multiple of --nnodes 2 (every node runs the same "
        "number of ranks)");
}

TEST_CASE("multi-node flags: serve and generate accept nnodes > 1, the one-node commands "
          "refuse it", "[config]") {
  EngineArgs serve;
  serve.model = "m.gguf";
  serve.tensor_parallel_size = 2;
  serve.multinode.nnodes = 2;
  serve.device = "cpu";
  CHECK_NOTHROW(serve.validate());
  serve.device = "cuda";
  CHECK_NOTHROW(serve.validate());
  serve.device = "cpu";
  serve.tensor_parallel_size = 4;
  CHECK_THROWS_WITH(serve.validate(), Catch::Contains("--tensor-parallel-size must be 2, got 4"));

  GenerateConfig g;
  g.model = "m.gguf";
  g.prompt = "hi";
  g.multinode.master_port = 0;
  CHECK_THROWS_WITH(g.validate(), "--master-port must be in [1, 65535], got 0");
  g.multinode.master_port = 29501;
  g.multinode.nnodes = 2;
  g.tensor_parallel_size = 2;
  g.device = "cuda";
  CHECK_NOTHROW(g.validate());

  PerplexityConfig p;
  p.model = "m.gguf";
  p.text = "t.txt";
  p.multinode.nnodes = 2;
  p.tensor_parallel_size = 2;
  CHECK_THROWS_WITH(p.validate(), kRefusal2);

  BenchLatencyConfig bl;
  bl.model = "m.gguf";
  bl.multinode.node_rank = 3;
  CHECK_THROWS_WITH(bl.validate(), "--node-rank must be in [0, --nnodes 1), got 3");
  bl.multinode.node_rank = 0;
  bl.multinode.nnodes = 2;
  bl.tensor_parallel_size = 2;
  CHECK_THROWS_WITH(bl.validate(), kRefusal2);

  BenchEngineConfig be;
  be.model = "m.gguf";
  be.multinode.nnodes = 4;
  be.tensor_parallel_size = 2;
  be.device = "cuda:0";
  CHECK_THROWS_WITH(be.validate(), "--tensor-parallel-size 2 must be a multiple of --nnodes 4 "
                                   "(every node runs the same number of ranks)");
  be.tensor_parallel_size = 4;
  be.device = "cuda";
  be.multinode.nnodes = 2;
  CHECK_THROWS_WITH(be.validate(), kRefusal2);
}

TEST_CASE("multi-node flags: model_engine_args carries them to the engine", "[config]") {
  GenerateConfig g;
  g.multinode.nnodes = 2;
  g.multinode.node_rank = 1;
  g.multinode.master_addr = "host-a";
  g.multinode.master_port = 1234;
  const EngineArgs a = model_engine_args(g);
  CHECK(a.multinode.nnodes == 2);
  CHECK(a.multinode.node_rank == 1);
  CHECK(a.multinode.master_addr == "host-a");
  CHECK(a.multinode.master_port == 1234);
}
