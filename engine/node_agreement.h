#pragma once
// Multi-node start-up agreement: before the first collective, every node must hold node 0's
// engine flags and KV cache settings, or a node that takes another path (a skipped start-up
// pass, fewer blocks) leaves the others waiting in a collective forever. Node 0 sends its
// text over the step channel, every other node checks it and the verdicts go to all nodes, so
// a mismatch fails every node at once.
#include <functional>
#include <string>

#include "config/engine_args.h"
#include "kernels/rank_group.h"

namespace octet {

/// The engine flags every node must share, one "name=value" line each; paths and per-machine
/// settings (model, tokenizer, kv_scales_path, node_rank, threads) are left out.
std::string shared_engine_flags(const EngineArgs& args);

/// Node 0 broadcasts `text`; node r > 0 calls check(node 0's text) -> an error message, or
/// empty when it agrees. Collective over `ch` (every node calls it). Throws
/// std::invalid_argument "node R: <message>" on every node when any node disagrees.
void agree_with_node0(HostChannel& ch, const std::string& text,
                      const std::function<std::string(const std::string&)>& check);

/// The first line where `mine` and `node0` differ, as an error naming `what` ("the flags");
/// empty when they are equal.
std::string first_difference(const std::string& mine, const std::string& node0,
                             const std::string& what);

}  // namespace octet
