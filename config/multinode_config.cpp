#include "config/multinode_config.h"

#include <stdexcept>

namespace octet {

void MultiNodeConfig::validate(const std::string& device, int64_t tensor_parallel_size) const {
  if (nnodes < 1 || nnodes > 64)
    throw std::invalid_argument("--nnodes must be in [1, 64], got " + std::to_string(nnodes));
  if (node_rank < 0 || node_rank >= nnodes)
    throw std::invalid_argument("--node-rank must be in [0, --nnodes " + std::to_string(nnodes) +
                                "), got " + std::to_string(node_rank));
  if (master_addr.empty())
    throw std::invalid_argument("--master-addr must be a host name or IP address, got ''");
  if (master_addr.find_first_of(" \t\r\n") != std::string::npos)
    throw std::invalid_argument("--master-addr must be a host name or IP address, got '" +
                                master_addr + "'");
  if (master_port < 1 || master_port > 65535)
    throw std::invalid_argument("--master-port must be in [1, 65535], got " +
                                std::to_string(master_port));
  if (tensor_parallel_size % nnodes != 0)
    throw std::invalid_argument("--tensor-parallel-size " + std::to_string(tensor_parallel_size) +
                                " must be a multiple of --nnodes " + std::to_string(nnodes) +
                                " (every node runs the same number of ranks)");
  if (nnodes > 1 && master_port > 65533)
    throw std::invalid_argument("--master-port must be in [1, 65533] with --nnodes > 1 (node 0 "
                                "also listens on master_port + 1 and + 2), got " +
                                std::to_string(master_port));
  if (nnodes > 1 && device == "cpu" && tensor_parallel_size != nnodes)
    throw std::invalid_argument("--device cpu with --nnodes " + std::to_string(nnodes) +
                                " runs one rank per node: --tensor-parallel-size must be " +
                                std::to_string(nnodes) + ", got " +
                                std::to_string(tensor_parallel_size));
}

void MultiNodeConfig::require_one_node() const {
  if (nnodes > 1) throw std::invalid_argument(multinode_unsupported_message(nnodes));
}

std::string multinode_unsupported_message(int64_t nnodes) {
  return "--nnodes " + std::to_string(nnodes) +
         ": this command runs on one node; multi-node tensor parallelism runs `octet serve` "
         "and `octet generate` (every node with the same flags and its --node-rank)";
}

}  // namespace octet
