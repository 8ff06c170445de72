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
  // Refused on every device for now (docs/cuda.md "Multi-node"). When the engine broadcasts
  // each step across nodes, this becomes "multi-node needs --device cuda" for other devices:
  // the CPU's ranks are threads of one process.
  (void)device;
  if (nnodes > 1) throw std::invalid_argument(multinode_unsupported_message(nnodes));
}

std::string multinode_unsupported_message(int64_t nnodes) {
  return "--nnodes " + std::to_string(nnodes) +
         ": multi-node is not supported yet (the engine has no per-step broadcast of the "
         "scheduled batch to the ranks on other nodes, which would wait forever); single-node "
         "tensor parallelism over NCCL works: --nnodes 1 --device cuda --tensor-parallel-size N";
}

}  // namespace octet
