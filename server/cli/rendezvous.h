#pragma once
// TCP rendezvous for a multi-node start (--nnodes, --node-rank, --master-addr, --master-port):
// rank 0 listens on master_addr:master_port, every other rank connects, and once all
// world_size - 1 peers have joined rank 0 sends each the same 128 bytes (an NCCL unique id,
// NCCL_UNIQUE_ID_BYTES; ncclCommInitRank then needs every rank to hold it). Host-only code on
// Boost.Asio, so it lives in server/ (DESIGN.md: Boost only in server/); the bytes go down to
// the communicator as plain data.
//
// Wire format (little-endian), one exchange per connection:
//   peer -> rank 0, hello [16]: magic "OCRV" (0x5652434F), version u16 (1), u16 0,
//                               world_size u32, rank u32
//   rank 0 -> peer, reply [16]: magic, version u16, status u16, rank 0's world_size u32, u32 0;
//                               then, when status is 0 (ok), the 128 id bytes
// Status: 0 ok, 1 version mismatch, 2 world size mismatch, 3 rank out of range, 4 duplicate
// rank: the peer fails with a RendezvousError saying which, and rank 0 keeps waiting. A
// connection whose first 16 bytes are not a hello (wrong magic, short, silent for
// kHelloTimeout) is closed without a reply and logged; rank 0 keeps waiting. Hellos are read
// concurrently, each connection with its own timer, so idle connections (a port scanner, a
// stuck process) never delay the real peers; beyond kMaxPendingHellos unfinished ones the
// oldest is closed. The ids go out
// only once every rank has joined, so the exchange is also a start-up barrier.
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "config/multinode_config.h"

namespace octet::server {

/// The bytes rank 0 hands every rank: NCCL_UNIQUE_ID_BYTES (128) of an ncclUniqueId.
inline constexpr size_t kRendezvousIdBytes = 128;
using RendezvousId = std::array<uint8_t, kRendezvousIdBytes>;

/// How long a multi-node start waits for every node to join the rendezvous.
inline constexpr std::chrono::milliseconds kRendezvousTimeout{300000};

/// How long rank 0 gives a new connection to send its hello before closing it (a real peer
/// sends it at once).
inline constexpr std::chrono::milliseconds kHelloTimeout{2000};

/// Connections rank 0 holds that have not sent their hello yet; a new one closes the oldest.
inline constexpr size_t kMaxPendingHellos = 256;

/// A failed rendezvous: timeout, bind or resolve failure, or a peer that rank 0 refused. The
/// message names the address, the ranks involved and what to check.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Rank 0's side. Listens from construction, so peers that connect before serve() wait in
/// the backlog. Not thread-safe; serve() once.
class RendezvousServer {
 public:
  /// Resolves addr (a host name or IP address of this machine) and listens on its first
  /// address at port (0 = any free port, for tests). Give an address the other nodes reach:
  /// a host name that /etc/hosts maps to 127.0.1.1 listens on loopback only. world_size >= 2 ranks in all, this one
  /// included. Throws RendezvousError naming addr:port when it cannot resolve or listen, and
  /// std::invalid_argument for world_size < 2.
  RendezvousServer(const std::string& addr, uint16_t port, int world_size);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  /// The port listened on.
  uint16_t port() const;

  /// Waits until ranks 1..world_size-1 have each sent a valid hello, then sends every one of
  /// them `id` and returns once all are written. Throws RendezvousError when `timeout` (from
  /// the call) passes first, naming the ranks that never arrived, or when writing the id to a
  /// joined rank fails.
  void serve(const RendezvousId& id, std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A peer's side (rank in [1, world_size)): connects to addr:port, retrying every 100 ms while
/// rank 0 is not yet listening, sends its hello and returns the id rank 0 sends once all ranks
/// have joined. Throws RendezvousError when `timeout` (from the call) passes first (naming the
/// last connection error), when rank 0 refuses this peer (the reason, e.g. a world size
/// mismatch) or closes the connection without a reply; std::invalid_argument for a rank
/// outside [1, world_size).
RendezvousId fetch_rendezvous_id(const std::string& addr, uint16_t port, int world_size,
                                 int rank, std::chrono::milliseconds timeout);

/// Either side: rank 0 serves `id` on addr:port (RendezvousServer) and returns it; any other
/// rank fetches it (fetch_rendezvous_id; `id` unused). world_size 1 returns `id` at once.
RendezvousId exchange_rendezvous_id(const std::string& addr, uint16_t port, int world_size,
                                    int rank, const RendezvousId& id,
                                    std::chrono::milliseconds timeout);

/// Sets mn.exchange_id when mn.nnodes > 1 (else leaves it empty): exchange_rendezvous_id over
/// mn.master_addr:master_port with the nodes as the rendezvous ranks (one process per node),
/// node 0 serving the id it is given, kRendezvousTimeout; throws RendezvousError as that does.
void set_rendezvous_exchange(MultiNodeConfig& mn);

}  // namespace octet::server
