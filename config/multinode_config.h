#pragma once
// Multi-node start-up options (vLLM's --nnodes, --node-rank, --master-addr, --master-port; the
// same names as torchrun's): which node this process is and where node 0 listens for the
// rendezvous that hands every node the NCCL unique id (server/cli/rendezvous.h). Declared once;
// the commands embed this struct and visit it after --tensor-parallel-size.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace octet {

struct MultiNodeConfig {
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29501;  // vLLM's default (torchrun's is 29500)
  /// Not a flag: set by the serve / generate commands when nnodes > 1 (server/cli/rendezvous.h's
  /// exchange over master_addr:master_port). Called once at load with node 0's new NCCL id
  /// (empty on the other nodes); returns node 0's id; throws on a timeout or refusal.
  std::function<std::vector<uint8_t>(const std::vector<uint8_t>& own_id)> exchange_id;

  /// Calls v(field, "snake_case_name", "help") for every option, in flag order.
  template <class Visitor>
  static void visit(MultiNodeConfig& c, Visitor&& v) {
    v(c.nnodes, "nnodes",
      "number of nodes (machines) the tensor-parallel ranks span; each runs "
      "tensor_parallel_size / nnodes ranks (the CPU: one, so tensor_parallel_size == nnodes). "
      "Node 0 serves (or generates) and sends every step to the others, which run "
      "`octet serve` or `octet generate` with the same model and flags and --node-rank N "
      "(serve and generate only)");
    v(c.node_rank, "node_rank", "this node's index in [0, nnodes); node 0 hosts the rendezvous");
    v(c.master_addr, "master_addr",
      "host name or IP address of node 0, where the other nodes connect");
    v(c.master_port, "master_port",
      "first of the TCP ports node 0 listens on: master_port (rendezvous: the NCCL id), "
      "master_port + 1 (each step's batch), master_port + 2 (the CPU's collectives)");
  }

  /// Throws std::invalid_argument naming the flag for nnodes outside [1, 64], node_rank outside
  /// [0, nnodes), an empty master_addr or one with whitespace, master_port outside [1, 65535]
  /// (nnodes > 1: [1, 65533], as node 0 listens on master_port .. master_port + 2), a
  /// tensor_parallel_size that is not a multiple of nnodes, and --device cpu with nnodes > 1
  /// and tensor_parallel_size != nnodes (one rank per node on the CPU). Commands call this
  /// before any rendezvous or model load.
  void validate(const std::string& device, int64_t tensor_parallel_size) const;

  /// Throws std::invalid_argument(multinode_unsupported_message(nnodes)) when nnodes > 1: for
  /// the commands that run on one node only (perplexity, the benches).
  void require_one_node() const;

  /// Node 0's port for the per-step broadcast (every device) and for the CPU's collectives.
  int64_t step_port() const { return master_port + 1; }
  int64_t cpu_collective_port() const { return master_port + 2; }

  /// Tensor-parallel ranks on each node: tensor_parallel_size / nnodes (after validate()).
  int64_t ranks_per_node(int64_t tensor_parallel_size) const {
    return tensor_parallel_size / nnodes;
  }
};

/// The one-line start-up error for --nnodes > 1 on a command that runs on one node only.
std::string multinode_unsupported_message(int64_t nnodes);

}  // namespace octet
