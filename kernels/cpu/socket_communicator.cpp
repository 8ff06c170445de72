// SocketCommunicator (kernels/cpu/socket_communicator.h): the star over blocking TCP sockets.
#include "kernels/cpu/socket_communicator.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "kernels/common/check.h"
#include "kernels/common/half.h"

namespace octet::cpu {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x4353434F;  // "OCSC" little-endian
constexpr uint32_t kVersion = 1;
enum : uint32_t { kOk = 0, kBadVersion = 1, kBadWorld = 2, kBadRank = 3 };
// Node 0 reads every joining connection's hello concurrently (one poll loop), each with its
// own deadline, so that silent connections (a port scanner, a stuck process) never delay the
// real peers; past kMaxPendingJoins unfinished ones, the oldest is closed.
constexpr auto kJoinHelloTimeout = std::chrono::seconds(2);
constexpr size_t kMaxPendingJoins = 256;

std::string errno_text() { return std::strerror(errno); }

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

// No Nagle delay (small headers go at once). A peer machine that vanishes (no FIN, no RST) is
// found by keep-alive probes after 10 s idle, 6 probes 5 s apart, and unacknowledged data
// fails after 60 s (TCP_USER_TIMEOUT); a live peer's kernel answers both even while it
// computes, so only a dead or unreachable machine trips them.
void tune(int fd) {
  int one = 1, idle_s = 10, interval_s = 5, probes = 6;
  unsigned int user_timeout_ms = 60000;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

/// Reads exactly n bytes before the deadline; false on EOF, error or timeout.
bool read_until(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t got = recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_fully(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }  // x86/ARM: little-endian
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

addrinfo* resolve(const std::string& addr, int port, bool passive, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    throw std::runtime_error(where + ": cannot resolve '" + addr + "': " + gai_strerror(rc));
  return res;
}

}  // namespace

struct SocketCommunicator::Header {
  uint32_t op = 0, root = 0;
  int64_t count = 0;
  uint64_t seq = 0;
};

SocketCommunicator::SocketCommunicator(const std::string& addr, int port, int rank,
                                       int world_size, std::chrono::milliseconds timeout,
                                       const std::string& what)
    : rank_(rank), world_size_(world_size) {
  if (world_size < 2 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("socket communicator: rank " + std::to_string(rank) +
                                " of world size " + std::to_string(world_size) +
                                " (needs world size >= 2 and rank in [0, world size))");
  if (port < 1 || port > 65535)
    throw std::invalid_argument("socket communicator: port must be in [1, 65535], got " +
                                std::to_string(port));
  where_ = addr + ":" + std::to_string(port) + " (" + what + ")";
  const auto deadline = Clock::now() + timeout;
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(world_size);
  if (rank == 0) {
    fds_.assign(static_cast<size_t>(world_size), -1);
    addrinfo* res = resolve(addr, port, true, where_);
    const int lfd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (lfd >= 0) setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const bool ok = lfd >= 0 && bind(lfd, res->ai_addr, res->ai_addrlen) == 0 &&
                    listen(lfd, 64) == 0;
    const std::string err = errno_text();
    freeaddrinfo(res);
    if (!ok) {
      if (lfd >= 0) close(lfd);
      throw std::runtime_error("node 0 cannot listen on " + where_ + ": " + err +
                               " (--master-addr must be this machine's address and the port "
                               "free)");
    }
    accept_peers(lfd, deadline, timeout);
    close(lfd);
    return;
  }
  fds_.assign(1, -1);
  std::string last_error = "none";
  for (;;) {
    if (Clock::now() >= deadline)
      throw std::runtime_error(who + " timed out after " + std::to_string(timeout.count() / 1000) +
                               " s connecting to node 0 at " + where_ + " (last error: " +
                               last_error + "; is node 0 started with the same --nnodes and "
                               "--master-addr/--master-port?)");
    addrinfo* res = resolve(addr, port, false, where_);
    int fd = -1;
    for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
      fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        last_error = errno_text();
        close(fd);
        fd = -1;
      }
    }
    freeaddrinfo(res);
    if (fd < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    tune(fd);
    uint8_t hello[16];
    put_u32(hello, kMagic);
    put_u32(hello + 4, kVersion);
    put_u32(hello + 8, static_cast<uint32_t>(world_size));
    put_u32(hello + 12, static_cast<uint32_t>(rank));
    uint8_t reply[8];
    if (!write_fully(fd, hello, sizeof hello) || !read_until(fd, reply, sizeof reply, deadline)) {
      close(fd);
      last_error = "node 0 closed the connection without a reply";
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const uint32_t status = get_u32(reply);
    if (status != kOk) {
      close(fd);
      const std::string why =
          status == kBadWorld
              ? "node 0 expects " + std::to_string(get_u32(reply + 4)) + " nodes, this one " +
                    std::to_string(world_size) + " (check --nnodes)"
          : status == kBadRank ? "rank " + std::to_string(rank) +
                                     " is taken or out of range (check --node-rank)"
                               : "node 0 runs another octet version";
      throw std::runtime_error(who + ": refused by node 0 at " + where_ + ": " + why);
    }
    fds_[0] = fd;
    return;
  }
}

void SocketCommunicator::accept_peers(int lfd, Clock::time_point deadline,
                                      std::chrono::milliseconds timeout) {
  // Every connection not yet a peer: its hello so far and until when it may send the rest.
  struct Pending {
    int fd;
    uint8_t hello[16];
    size_t got;
    Clock::time_point until;
  };
  std::vector<Pending> pending;
  auto drop = [](Pending& p) {
    close(p.fd);
    p.fd = -1;
  };
  int joined = 0;
  while (joined < world_size_ - 1) {
    std::vector<pollfd> pfds{{lfd, POLLIN, 0}};
    Clock::time_point wake = deadline;
    for (const Pending& p : pending) {
      pfds.push_back({p.fd, POLLIN, 0});
      wake = std::min(wake, p.until);
    }
    const int ready = poll(pfds.data(), pfds.size(), remaining_ms(wake));
    if (ready < 0 && errno != EINTR) throw std::runtime_error("node 0 on " + where_ + ": poll: " +
                                                              errno_text());
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string missing;
      for (int r = 1; r < world_size_; ++r)
        if (fds_[r] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      close(lfd);
      for (Pending& p : pending) drop(p);
      for (int& fd : fds_)
        if (fd >= 0) close(fd), fd = -1;
      throw std::runtime_error("node 0 on " + where_ + ": timed out after " +
                               std::to_string(timeout.count() / 1000) + " s waiting for node(s) " +
                               missing + " (start every node with the same --nnodes and "
                               "--master-addr/--master-port)");
    }
    if (ready <= 0) {  // a pending connection's time is up (or EINTR)
      for (Pending& p : pending)
        if (p.until <= now) drop(p);
    }
    for (size_t i = 0; ready > 0 && i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (pfds[i + 1].revents == 0) {
        if (p.until <= now) drop(p);  // silent past its deadline
        continue;
      }
      const ssize_t n = recv(p.fd, p.hello + p.got, sizeof p.hello - p.got, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) {  // closed or failed before a whole hello
        drop(p);
        continue;
      }
      p.got += static_cast<size_t>(n);
      if (p.got < sizeof p.hello) continue;
      // A connection that is not a peer (wrong magic) is dropped; node 0 keeps waiting.
      if (get_u32(p.hello) != kMagic) {
        drop(p);
        continue;
      }
      const uint32_t version = get_u32(p.hello + 4), world = get_u32(p.hello + 8),
                     r = get_u32(p.hello + 12);
      uint32_t status = kOk;
      if (version != kVersion)
        status = kBadVersion;
      else if (world != static_cast<uint32_t>(world_size_))
        status = kBadWorld;
      else if (r == 0 || r >= static_cast<uint32_t>(world_size_) || fds_[r] >= 0)
        status = kBadRank;
      uint8_t reply[8];
      put_u32(reply, status);
      put_u32(reply + 4, static_cast<uint32_t>(world_size_));
      const bool sent = write_fully(p.fd, reply, sizeof reply);  // 8 bytes: the socket buffer
      if (status != kOk || !sent) {
        drop(p);
        continue;
      }
      fds_[r] = p.fd;
      p.fd = -1;
      ++joined;
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Pending& p) { return p.fd < 0; }),
                  pending.end());
    if ((pfds[0].revents & POLLIN) != 0 && joined < world_size_ - 1) {
      const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        tune(fd);
        if (pending.size() >= kMaxPendingJoins) {  // a flood: the oldest gives way
          close(pending.front().fd);
          pending.erase(pending.begin());
        }
        pending.push_back({fd, {}, 0, std::min(deadline, Clock::now() + kJoinHelloTimeout)});
      }
    }
  }
  for (Pending& p : pending) drop(p);
  close(lfd);
}

SocketCommunicator::~SocketCommunicator() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

void SocketCommunicator::lost(int peer, const std::string& why) {
  broken_ = true;
  broken_why_ = "rank " + std::to_string(rank_) + " lost its connection to rank " +
                std::to_string(peer) + " on " + where_ + ": " + why;
  for (int& fd : fds_)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);  // the other peers see the loss too
  throw PeerLost(broken_why_);
}

void SocketCommunicator::check_usable() const {
  if (broken_) throw PeerLost(broken_why_);
}

void SocketCommunicator::send_all(int peer, const void* data, int64_t bytes) {
  const int fd = rank_ == 0 ? fds_[peer] : fds_[0];
  if (!write_fully(fd, data, static_cast<size_t>(bytes)))
    lost(peer, "send failed (" + errno_text() + ")");
}

void SocketCommunicator::recv_all(int peer, void* data, int64_t bytes) {
  const int fd = rank_ == 0 ? fds_[peer] : fds_[0];
  auto* p = static_cast<uint8_t*>(data);
  auto n = static_cast<size_t>(bytes);
  while (n > 0) {
    if (silence_timeout_.count() > 0) {
      pollfd pfd{fd, POLLIN, 0};
      const int ready = poll(&pfd, 1, static_cast<int>(silence_timeout_.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0)
        lost(peer, "no data for " + std::to_string(silence_timeout_.count() / 1000.0) +
                       " s: the peer is alive but not answering (stopped, swapping or hung)");
    }
    const ssize_t got = recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) lost(peer, "the peer closed the connection");
    if (got < 0) lost(peer, "receive failed (" + errno_text() + ")");
    p += got;
    n -= static_cast<size_t>(got);
  }
}

void SocketCommunicator::begin(Op op, int root, int64_t count) {
  check_usable();
  Header h{static_cast<uint32_t>(op), static_cast<uint32_t>(root), count, seq_};
  if (rank_ != 0) {
    send_all(0, &h, sizeof h);
    return;
  }
  for (int peer = 1; peer < world_size_; ++peer) {
    recv_all(peer, &h, sizeof h);
    OCTET_CHECK(h.op == static_cast<uint32_t>(op) && h.root == static_cast<uint32_t>(root) &&
                  h.count == count && h.seq == seq_,
              "ranks disagree on collective ", seq_, ": rank ", rank_, " called op ",
              static_cast<uint32_t>(op), " (count ", count, ", root ", root, "), rank ", peer,
              " op ", h.op, " (count ", h.count, ", root ", h.root, ", collective ", h.seq, ")");
  }
}

template <class Reduce>
void SocketCommunicator::all_reduce(Op op, float* buf, int64_t count, Reduce reduce) {
  OCTET_CHECK(count >= 0 && (buf != nullptr || count == 0), "all_reduce: count ", count);
  begin(op, 0, count);
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  if (rank_ == 0) {
    scratch_.resize(static_cast<size_t>(count));
    for (int r = 1; r < world_size_; ++r) {  // rank order: ((b0 op b1) op b2) op ...
      recv_all(r, scratch_.data(), bytes);
      for (int64_t i = 0; i < count; ++i) buf[i] = reduce(buf[i], scratch_[i]);
    }
    for (int r = 1; r < world_size_; ++r) send_all(r, buf, bytes);
  } else {
    send_all(0, buf, bytes);
    recv_all(0, buf, bytes);
  }
  ++seq_;
}

void SocketCommunicator::all_reduce_sum(float* buf, int64_t count) {
  all_reduce(Op::Sum, buf, count, [](float a, float b) { return a + b; });
}

void SocketCommunicator::all_reduce_sum_bf16(uint16_t* buf, int64_t count) {
  OCTET_CHECK(count >= 0 && (buf != nullptr || count == 0), "all_reduce_sum_bf16: count ", count);
  begin(Op::SumBf16, 0, count);
  const int64_t bytes = count * static_cast<int64_t>(sizeof(uint16_t));
  if (rank_ == 0) {
    scratch_.resize(static_cast<size_t>(count));  // the FP32 sums
    peer_bf16_.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) scratch_[i] = bf16_to_float(buf[i]);
    for (int r = 1; r < world_size_; ++r) {  // rank order, in FP32: ((b0 + b1) + b2) + ...
      recv_all(r, peer_bf16_.data(), bytes);
      for (int64_t i = 0; i < count; ++i) scratch_[i] += bf16_to_float(peer_bf16_[i]);
    }
    for (int64_t i = 0; i < count; ++i) buf[i] = float_to_bf16(scratch_[i]);  // one rounding
    for (int r = 1; r < world_size_; ++r) send_all(r, buf, bytes);
  } else {
    send_all(0, buf, bytes);
    recv_all(0, buf, bytes);
  }
  ++seq_;
}

void SocketCommunicator::all_reduce_max(float* buf, int64_t count) {
  all_reduce(Op::Max, buf, count, [](float a, float b) { return std::fmax(a, b); });
}

void SocketCommunicator::all_gather(const float* send, int64_t count, float* recv) {
  OCTET_CHECK(count >= 0 && ((send != nullptr && recv != nullptr) || count == 0),
              "all_gather: count ", count);
  begin(Op::Gather, 0, count);
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  float* own = recv + rank_ * count;
  if (own != send) std::copy(send, send + count, own);
  if (rank_ == 0) {
    for (int r = 1; r < world_size_; ++r) recv_all(r, recv + r * count, bytes);
    for (int r = 1; r < world_size_; ++r) send_all(r, recv, bytes * world_size_);
  } else {
    send_all(0, own, bytes);
    recv_all(0, recv, bytes * world_size_);
  }
  ++seq_;
}

void SocketCommunicator::broadcast(void* buf, int64_t bytes, int root) {
  OCTET_CHECK(root >= 0 && root < world_size_, "broadcast: root ", root, " of world_size ",
              world_size_);
  OCTET_CHECK(bytes >= 0 && (buf != nullptr || bytes == 0), "broadcast: bytes ", bytes);
  begin(Op::Broadcast, root, bytes);
  if (rank_ == 0) {
    if (root != 0) {  // through the hub: root -> 0 -> the others
      recv_all(root, buf, bytes);
    }
    for (int r = 1; r < world_size_; ++r)
      if (r != root) send_all(r, buf, bytes);
  } else if (rank_ == root) {
    send_all(0, buf, bytes);
  } else {
    recv_all(0, buf, bytes);
  }
  ++seq_;
}

void SocketCommunicator::broadcast_bytes(std::vector<uint8_t>& bytes, int root) {
  int64_t n = static_cast<int64_t>(bytes.size());
  broadcast(&n, sizeof n, root);
  if (rank_ != root) bytes.resize(static_cast<size_t>(n));
  broadcast(bytes.data(), n, root);
}

}  // namespace octet::cpu
