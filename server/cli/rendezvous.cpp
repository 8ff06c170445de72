// The TCP rendezvous (server/cli/rendezvous.h): rank 0 runs one single-threaded io_context with an
// accept loop and one pending hello read (with its own timer) per connection; peers connect
// with retries and read the reply. Every wait is bounded by the caller's deadline.
#include "server/cli/rendezvous.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

namespace octet::server {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr uint32_t kMagic = 0x5652434F;  // "OCRV" in little-endian byte order
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 16;
using Header = std::array<uint8_t, kHeaderBytes>;

enum Status : uint16_t {
  kOk = 0,
  kVersionMismatch = 1,
  kWorldSizeMismatch = 2,
  kRankOutOfRange = 3,
  kDuplicateRank = 4,
};

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// hello: magic, version, 0, world_size, rank. reply: magic, version, status, world_size, 0.
Header make_header(uint16_t word, uint32_t a, uint32_t b) {
  Header h{};
  put_u32(h.data(), kMagic);
  put_u16(h.data() + 4, kVersion);
  put_u16(h.data() + 6, word);
  put_u32(h.data() + 8, a);
  put_u32(h.data() + 12, b);
  return h;
}

std::string where(const std::string& addr, uint16_t port) {
  return addr + ":" + std::to_string(port);
}

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", seconds(ms));
  return buf;
}

/// Runs io until *done or the deadline; on timeout closes `s`, so that its pending operation
/// completes (aborted) before return. Returns *done.
bool run_until(asio::io_context& io, tcp::socket& s, const bool& done, Clock::time_point deadline) {
  io.restart();
  while (!done && io.run_one_until(deadline) > 0) {
  }
  if (!done) {
    error_code ignored;
    s.close(ignored);
    io.restart();
    io.run();
  }
  return done;
}

/// Starts one asynchronous operation through `start(handler)` and waits for it (or the
/// deadline: then asio::error::timed_out).
template <class Start>
error_code run_op(asio::io_context& io, tcp::socket& s, Clock::time_point deadline,
                  Start&& start) {
  bool done = false;
  error_code result;
  start([&](const error_code& ec, auto&&...) {
    result = ec;
    done = true;
  });
  if (!run_until(io, s, done, deadline)) return asio::error::timed_out;
  return result;
}

}  // namespace

// ---- rank 0 ---------------------------------------------------------------------------------

struct RendezvousServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  int world_size = 0;
  std::string addr;
  uint16_t port = 0;

  // State of one serve() call.
  std::vector<std::shared_ptr<tcp::socket>> joined;  // [world_size], null until that rank joins
  int num_joined = 0;
  int writes_pending = 0;
  bool done = false;
  std::optional<std::string> error;
  std::vector<std::weak_ptr<tcp::socket>> all_sockets;  // closed at the end of serve()
  std::map<uint64_t, std::weak_ptr<tcp::socket>> pending;  // no hello yet, by accept order
  uint64_t accepted = 0;
  asio::steady_timer accept_retry{io};  // after a failed accept (e.g. out of descriptors)
  const RendezvousId* id = nullptr;
  Clock::time_point deadline;

  std::string here() const { return where(addr, port); }

  void accept_next() {
    auto sock = std::make_shared<tcp::socket>(io);
    acceptor.async_accept(*sock, [this, sock](const error_code& ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {  // e.g. EMFILE: retry shortly rather than spin
        spdlog::warn("rendezvous on {}: accept failed: {}", here(), ec.message());
        accept_retry.expires_after(std::chrono::milliseconds(100));
        accept_retry.async_wait([this](const error_code& e) {
          if (!e && acceptor.is_open()) accept_next();
        });
        return;
      }
      if (all_sockets.size() >= 4 * kMaxPendingHellos)  // forget the closed ones
        all_sockets.erase(std::remove_if(all_sockets.begin(), all_sockets.end(),
                                         [](const auto& w) { return w.expired(); }),
                          all_sockets.end());
      all_sockets.push_back(sock);
      if (pending.size() >= kMaxPendingHellos) {  // a flood: the oldest gives way
        if (auto oldest = pending.begin()->second.lock()) {
          error_code ignored;
          oldest->close(ignored);
        }
        pending.erase(pending.begin());
      }
      const uint64_t seq = accepted++;
      pending.emplace(seq, sock);
      read_hello(sock, seq);
      accept_next();
    });
  }

  void read_hello(const std::shared_ptr<tcp::socket>& sock, uint64_t seq) {
    auto hello = std::make_shared<Header>();
    auto timer = std::make_shared<asio::steady_timer>(io);
    timer->expires_at(std::min(deadline, Clock::now() + kHelloTimeout));
    timer->async_wait([sock](const error_code& ec) {
      if (!ec) {
        error_code ignored;
        sock->close(ignored);
      }
    });
    asio::async_read(*sock, asio::buffer(*hello),
                     [this, sock, hello, timer, seq](const error_code& ec, size_t) {
                       timer->cancel();
                       pending.erase(seq);
                       on_hello(sock, *hello, ec);
                     });
  }

  static std::string peer_name(tcp::socket& s) {
    error_code ec;
    const tcp::endpoint ep = s.remote_endpoint(ec);
    if (ec) return "a peer";
    return ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void drop(tcp::socket& s, const std::string& why) {
    spdlog::warn("rendezvous on {}: dropped the connection from {}: {}", here(), peer_name(s),
                 why);
    error_code ignored;
    s.close(ignored);
  }

  void on_hello(const std::shared_ptr<tcp::socket>& sock, const Header& h, const error_code& ec) {
    if (done) return;
    if (ec) {
      if (ec != asio::error::operation_aborted || sock->is_open())
        drop(*sock, "no complete hello (" + ec.message() + ")");
      else
        drop(*sock, "no hello within " + seconds_text(kHelloTimeout));
      return;
    }
    if (get_u32(h.data()) != kMagic) {
      drop(*sock, "not an octet rendezvous peer (wrong magic)");
      return;
    }
    const uint16_t version = get_u16(h.data() + 4);
    const uint32_t world = get_u32(h.data() + 8);
    const uint32_t rank = get_u32(h.data() + 12);
    uint16_t status = kOk;
    if (version != kVersion)
      status = kVersionMismatch;
    else if (world != static_cast<uint32_t>(world_size))
      status = kWorldSizeMismatch;
    else if (rank == 0 || rank >= static_cast<uint32_t>(world_size))
      status = kRankOutOfRange;
    else if (joined[rank])
      status = kDuplicateRank;
    if (status != kOk) {
      spdlog::warn("rendezvous on {}: refused {} (version {}, world size {}, rank {}; status {})",
                   here(), peer_name(*sock), version, world, rank, status);
      auto reply = std::make_shared<Header>(make_header(status, world_size, 0));
      asio::async_write(*sock, asio::buffer(*reply), [sock, reply](const error_code&, size_t) {
        error_code ignored;
        sock->close(ignored);
      });
      return;
    }
    joined[rank] = sock;
    if (++num_joined == world_size - 1) send_ids();
  }

  void send_ids() {
    error_code ignored;
    acceptor.close(ignored);
    auto reply = std::make_shared<Header>(make_header(kOk, world_size, 0));
    writes_pending = world_size - 1;
    for (int r = 1; r < world_size; ++r) {
      std::shared_ptr<tcp::socket> sock = joined[r];
      const std::array<asio::const_buffer, 2> bufs{asio::buffer(*reply), asio::buffer(*id)};
      asio::async_write(*sock, bufs, [this, sock, reply, r](const error_code& ec, size_t) {
        if (ec && !error)
          error = "rendezvous on " + here() + ": sending the id to rank " + std::to_string(r) +
                  " failed: " + ec.message();
        if (--writes_pending == 0) done = true;
      });
    }
  }

  std::string missing_ranks() const {
    std::string s;
    for (int r = 1; r < world_size; ++r)
      if (!joined[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
  }
};

RendezvousServer::RendezvousServer(const std::string& addr, uint16_t port, int world_size)
    : impl_(std::make_unique<Impl>()) {
  if (world_size < 2)
    throw std::invalid_argument("rendezvous: world_size must be >= 2, got " +
                                std::to_string(world_size));
  Impl& m = *impl_;
  m.world_size = world_size;
  m.addr = addr;
  error_code ec;
  tcp::resolver resolver(m.io);
  const auto results = resolver.resolve(addr, std::to_string(port), ec);
  if (ec || results.empty())
    throw RendezvousError("rendezvous: cannot resolve --master-addr '" + addr +
                          "': " + ec.message());
  const tcp::endpoint ep = results.begin()->endpoint();
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw RendezvousError("rendezvous: node 0 cannot listen on " + where(addr, port) + ": " +
                          ec.message() + " (--master-addr must be this machine's address, "
                          "--master-port a free port)");
  m.port = m.acceptor.local_endpoint().port();
}

RendezvousServer::~RendezvousServer() = default;

uint16_t RendezvousServer::port() const { return impl_->port; }

void RendezvousServer::serve(const RendezvousId& id, std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  if (!m.acceptor.is_open())
    throw std::logic_error("RendezvousServer::serve called twice");
  m.joined.assign(m.world_size, nullptr);
  m.id = &id;
  m.deadline = Clock::now() + timeout;
  m.accept_next();
  while (!m.done && m.io.run_one_until(m.deadline) > 0) {
  }
  // Close everything and drain the aborted handlers while `id` is still alive.
  const bool done = m.done;
  m.done = true;
  error_code ignored;
  m.acceptor.close(ignored);
  m.accept_retry.cancel();
  for (const auto& w : m.all_sockets)
    if (auto s = w.lock()) s->close(ignored);
  m.io.restart();
  m.io.run();
  m.joined.clear();
  m.pending.clear();
  if (m.error) throw RendezvousError(*m.error);
  if (!done)
    throw RendezvousError("rendezvous on " + m.here() + ": timed out after " +
                          seconds_text(timeout) + " waiting for rank(s) " + m.missing_ranks() +
                          " of world size " + std::to_string(m.world_size) + " (" +
                          std::to_string(m.num_joined) + " of " +
                          std::to_string(m.world_size - 1) +
                          " peers joined; check that every node was started with the same "
                          "--nnodes and --master-addr/--master-port)");
}

// ---- the other ranks ------------------------------------------------------------------------

namespace {

std::string refusal(uint16_t status, uint32_t their_world, int world_size, int rank) {
  switch (status) {
    case kVersionMismatch: return "rank 0 speaks another rendezvous version (octet builds differ)";
    case kWorldSizeMismatch:
      return "rank 0 expects world size " + std::to_string(their_world) + ", this rank said " +
             std::to_string(world_size) + " (check --nnodes and --tensor-parallel-size)";
    case kRankOutOfRange:
      return "rank " + std::to_string(rank) + " is out of range for rank 0 (check --node-rank)";
    case kDuplicateRank:
      return "another process already joined as rank " + std::to_string(rank) +
             " (check --node-rank)";
    default: return "unknown status " + std::to_string(status);
  }
}

}  // namespace

RendezvousId fetch_rendezvous_id(const std::string& addr, uint16_t port, int world_size,
                                 int rank, std::chrono::milliseconds timeout) {
  if (world_size < 2 || rank < 1 || rank >= world_size)
    throw std::invalid_argument("rendezvous: rank " + std::to_string(rank) +
                                " must be in [1, world_size " + std::to_string(world_size) + ")");
  const auto deadline = Clock::now() + timeout;
  const std::string at = where(addr, port);
  const std::string who = "rendezvous: rank " + std::to_string(rank) + " of " +
                          std::to_string(world_size);
  asio::io_context io;
  tcp::resolver resolver(io);
  std::string last_error = "none";
  for (;;) {
    if (Clock::now() >= deadline)
      throw RendezvousError(who + " timed out after " + seconds_text(timeout) +
                            " waiting for rank 0 at " + at + " (last error: " + last_error +
                            "; is node 0 started with the same --master-addr/--master-port?)");
    error_code ec;
    const auto endpoints = resolver.resolve(addr, std::to_string(port), ec);
    tcp::socket sock(io);
    if (!ec)
      ec = run_op(io, sock, deadline, [&](auto handler) {
        asio::async_connect(sock, endpoints, handler);
      });
    if (ec) {
      last_error = ec.message();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const Header hello = make_header(0, world_size, rank);
    ec = run_op(io, sock, deadline, [&](auto handler) {
      asio::async_write(sock, asio::buffer(hello), handler);
    });
    Header reply{};
    if (!ec)
      ec = run_op(io, sock, deadline, [&](auto handler) {
        asio::async_read(sock, asio::buffer(reply), handler);
      });
    if (ec == asio::error::timed_out)
      throw RendezvousError(who + " timed out after " + seconds_text(timeout) +
                            " waiting for the id from rank 0 at " + at +
                            " (connected; rank 0 is still waiting for other ranks)");
    if (ec)
      throw RendezvousError(who + ": rank 0 at " + at + " closed the connection without a "
                            "reply (" + ec.message() + ")");
    if (get_u32(reply.data()) != kMagic)
      throw RendezvousError(who + ": " + at + " is not an octet rendezvous (wrong magic)");
    const uint16_t status = get_u16(reply.data() + 6);
    if (status != kOk)
      throw RendezvousError(who + ": refused by rank 0 at " + at + ": " +
                            refusal(status, get_u32(reply.data() + 8), world_size, rank));
    RendezvousId id{};
    ec = run_op(io, sock, deadline, [&](auto handler) {
      asio::async_read(sock, asio::buffer(id), handler);
    });
    if (ec)
      throw RendezvousError(who + ": reading the id from rank 0 at " + at +
                            " failed: " + ec.message());
    return id;
  }
}

RendezvousId exchange_rendezvous_id(const std::string& addr, uint16_t port, int world_size,
                                    int rank, const RendezvousId& id,
                                    std::chrono::milliseconds timeout) {
  if (world_size == 1) return id;
  if (rank == 0) {
    RendezvousServer server(addr, port, world_size);
    server.serve(id, timeout);
    return id;
  }
  return fetch_rendezvous_id(addr, port, world_size, rank, timeout);
}

void set_rendezvous_exchange(MultiNodeConfig& mn) {
  if (mn.nnodes <= 1) return;
  const std::string addr = mn.master_addr;
  const auto port = static_cast<uint16_t>(mn.master_port);
  const int nodes = static_cast<int>(mn.nnodes), node = static_cast<int>(mn.node_rank);
  mn.exchange_id = [addr, port, nodes, node](const std::vector<uint8_t>& own) {
    RendezvousId id{};
    if (node == 0) {
      if (own.size() != id.size())
        throw RendezvousError("rendezvous: node 0 was given " + std::to_string(own.size()) +
                              " id bytes, expected " + std::to_string(id.size()));
      std::copy(own.begin(), own.end(), id.begin());
    }
    const RendezvousId got = exchange_rendezvous_id(addr, port, nodes, node, id,
                                                    kRendezvousTimeout);
    return std::vector<uint8_t>(got.begin(), got.end());
  };
}

}  // namespace octet::server
