// SocketCommunicator: a Communicator between processes (one rank each) over TCP, for
// multi-node runs on the CPU and for the per-step broadcast of host metadata on any device
// (vLLM's gloo CPU group, in a small form). POSIX sockets, blocking, so kernels/cpu stays free
// of Boost.
//
// Topology: a star. Rank 0 listens on addr:port and accepts world_size - 1 connections; every
// other rank connects (retrying every 100 ms until the deadline) and sends a hello
//   [16]: magic "OCSC" (0x4353434F) u32, version u32 (1), world_size u32, rank u32
// answered by rank 0 with [8]: status u32 (0 ok, 1 version, 2 world size, 3 rank out of range
// or duplicate), its world_size u32. Rank 0 reads the hellos of all connections at once, giving
// each 2 s, so that idle connections (a port scanner) never delay the real peers.
// Every collective starts with each rank sending rank 0 a header [24] (op u32, root u32,
// count i64, sequence number u64; rank 0 checks they all match: OCTET_CHECK), then rank 0
// gathers the data from ranks 1..N-1 in rank order and sends the result back.
//
// all_reduce_sum / _max reduce in rank order on rank 0 (out = b0; out = out op b_r for r = 1..N-1,
// element by element), the same expression as ThreadCommunicator's, so the results are bit
// identical to an in-process group of the same size. all_reduce_sum_bf16 sends BF16 (2 bytes an
// element each way) and adds the widened values in FP32 in the same order on rank 0, rounding
// each sum once: ThreadCommunicator's bits too.
//
// Errors: a peer that closes its connection or fails a read or write (process killed, machine
// down, network error) makes the collective throw PeerLost naming both ranks; the
// communicator is then broken and every later call throws PeerLost at once. Nothing waits
// forever on a dead peer: a killed process's sockets are closed by its kernel, and TCP
// keep-alive (10 s idle, then 6 probes 5 s apart) and a 60 s TCP_USER_TIMEOUT find a machine
// that vanished. A collective waits as long as its live peers compute (a stopped process
// whose kernel still answers is waited for).
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/communicator.h"

namespace octet::cpu {

/// A collective failed because a peer's connection was lost (closed, reset, or an I/O error).
class PeerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SocketCommunicator final : public Communicator {
 public:
  /// Joins the group: rank 0 listens on addr:port (a host name or IP address of this machine;
  /// port 0 is refused, every rank must know the port) and waits for ranks 1..world_size-1;
  /// the others connect to it. Returns once this rank is connected (rank 0: all ranks). Throws
  /// std::invalid_argument for a rank outside [0, world_size), world_size < 2, a port outside
  /// [1, 65535]; std::runtime_error naming addr:port and `what` (the group's purpose, for the
  /// message, e.g. "step broadcast") when it cannot resolve or listen, when rank 0 refuses
  /// this rank (world size mismatch, duplicate rank), or when `timeout` passes first.
  SocketCommunicator(const std::string& addr, int port, int rank, int world_size,
                     std::chrono::milliseconds timeout, const std::string& what);
  ~SocketCommunicator() override;
  SocketCommunicator(const SocketCommunicator&) = delete;
  SocketCommunicator& operator=(const SocketCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  void all_reduce_sum(float* buf, int64_t count) override;
  /// BF16 on the wire; the sum as ThreadCommunicator's (communicator.h).
  void all_reduce_sum_bf16(uint16_t* buf, int64_t count) override;
  void all_reduce_max(float* buf, int64_t count) override;
  /// recv may hold send in place (send == recv + rank * count); no other overlap.
  void all_gather(const float* send, int64_t count, float* recv) override;
  void broadcast(void* buf, int64_t bytes, int root) override;

  /// Root's `bytes` (any length) to every rank: the others' `bytes` are replaced by them.
  void broadcast_bytes(std::vector<uint8_t>& bytes, int root);

  /// The longest a receive may wait for a peer's next bytes before the peer counts as lost
  /// (PeerLost, and the group is broken as for a closed connection): a peer that is alive but
  /// not answering (stopped, swapping, deadlocked), which TCP keep-alive cannot see because its
  /// kernel still acknowledges. 0 (the default): wait as long as it takes.
  void set_silence_timeout(std::chrono::milliseconds timeout) { silence_timeout_ = timeout; }

 private:
  enum class Op : uint32_t { Sum = 1, Max = 2, Gather = 3, Broadcast = 4, SumBf16 = 5 };
  struct Header;
  template <class Reduce>
  void all_reduce(Op op, float* buf, int64_t count, Reduce reduce);
  void send_all(int peer, const void* data, int64_t bytes);
  void recv_all(int peer, void* data, int64_t bytes);
  // Every rank's header to rank 0, which checks that all called the same collective.
  void begin(Op op, int root, int64_t count);
  [[noreturn]] void lost(int peer, const std::string& why);
  void check_usable() const;
  // Rank 0: accepts on the listening lfd until ranks 1..N-1 have joined (fds_), reading the
  // hellos of all connections at once, each within 2 s; closes lfd. Throws at `deadline`.
  void accept_peers(int lfd, std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds timeout);

  int rank_;
  int world_size_;
  std::string where_;          // "addr:port (what)" for messages
  std::vector<int> fds_;       // rank 0: [world_size], fd of rank r (fds_[0] = -1); others: [1]
  uint64_t seq_ = 0;           // collectives so far
  bool broken_ = false;
  std::string broken_why_;
  std::vector<float> scratch_;  // rank 0: one peer's buffer in a reduction (BF16's: the sums)
  std::vector<uint16_t> peer_bf16_;  // rank 0: one peer's buffer in a BF16 reduction
  std::chrono::milliseconds silence_timeout_{0};  // 0: none
};

}  // namespace octet::cpu
