// make_rank_group (kernels/rank_group.h): the refusals every build gives (each message is
// checked for the words that tell the user what to change) and the CPU group's ranks, whose
// local and global ranks coincide on one node. The GPU group runs in test_nccl_rank_group.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/rank_group.h"

using namespace octet;

namespace {

// The message make_rank_group throws as std::invalid_argument ("" when it does not throw it).
std::string refusal(const std::string& device, int world, const RankPlacement& placement = {}) {
  try {
    (void)make_rank_group(device, world, placement);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("make_rank_group refuses bad sizes, devices and placements") {
  CHECK_THAT(refusal("cpu", 0), Catch::Contains("tensor_parallel_size must be >= 1, got 0"));
  // rank r always takes GPU r: a pinned GPU cannot hold two ranks.
  CHECK_THAT(refusal("cuda:1", 2), Catch::Contains("give --device cuda"));
  CHECK_THAT(refusal("tpu", 2), Catch::Contains("unknown device 'tpu'"));
  RankPlacement two_nodes;
  two_nodes.nnodes = 2;
  two_nodes.node_rank = 1;
  // The CPU runs one rank per node across nodes (TCP collectives).
  CHECK_THAT(refusal("cpu", 4, two_nodes),
             Catch::Contains("--tensor-parallel-size must equal --nnodes 2, got 4"));
  CHECK_THAT(refusal("cuda", 3, two_nodes), Catch::Contains("a multiple of the node count"));
  RankPlacement bad_node;
  bad_node.nnodes = 2;
  bad_node.node_rank = 2;
  CHECK_THAT(refusal("cuda", 4, bad_node), Catch::Contains("node 2 of 2 nodes"));
}

TEST_CASE("make_rank_group on the CPU: world_size threads, local rank == global rank") {
  for (int world : {1, 3}) {
    auto group = make_rank_group("cpu", world);
    REQUIRE(group->world_size() == world);
    std::vector<int> seen(static_cast<size_t>(world), -1), worlds(static_cast<size_t>(world), -1);
    std::atomic<int> calls{0};
    group->run([&](int rank, Communicator& comm) {
      seen[rank] = comm.rank();
      worlds[rank] = comm.world_size();
      ++calls;
    });
    CHECK(calls == world);
    for (int r = 0; r < world; ++r) {
      CHECK(seen[r] == r);
      CHECK(worlds[r] == world);
      CHECK(group->rank_backend(r) == nullptr);  // CPU ranks make their own backends
    }
  }
}
