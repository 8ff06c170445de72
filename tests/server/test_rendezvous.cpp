// The multi-node TCP rendezvous (server/cli/rendezvous.h) over real sockets on 127.0.0.1: every
// rank gets rank 0's bytes, a missing peer times out with a message naming it, and wrong
// peers (garbage, silent, short, wrong world size, duplicate rank) are turned away while rank
// 0 keeps waiting. Raw clients speak the wire format as the header comment spells it, bytes
// written out by hand here.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/cli/rendezvous.h"

using namespace std::chrono_literals;
using octet::server::exchange_rendezvous_id;
using octet::server::fetch_rendezvous_id;
using octet::server::kHelloTimeout;
using octet::server::kMaxPendingHellos;
using octet::server::RendezvousError;
using octet::server::RendezvousId;
using octet::server::RendezvousServer;

namespace {

const std::string kHost = "127.0.0.1";

RendezvousId pattern_id() {
  RendezvousId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 7 + 3);
  return id;
}

// A free TCP port on 127.0.0.1 right now (bound to port 0, read back, closed).
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A raw client socket connected to 127.0.0.1:port, closed on scope exit.
struct RawClient {
  int fd = -1;
  explicit RawClient(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~RawClient() {
    if (fd >= 0) ::close(fd);
  }
  void send_bytes(const std::vector<uint8_t>& b) {
    REQUIRE(::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
  }
  // Reads until n bytes, end of file or timeout; returns what came.
  std::vector<uint8_t> read_up_to(size_t n, std::chrono::milliseconds timeout, bool* eof) {
    std::vector<uint8_t> out;
    *eof = false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      uint8_t buf[256];
      const ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) {
        *eof = true;
        break;
      }
      out.insert(out.end(), buf, buf + got);
    }
    return out;
  }
};

// The hello of the wire format: "OCRV", version 1 (u16 LE), 0 (u16), world, rank (u32 LE).
std::vector<uint8_t> hello(uint32_t world, uint32_t rank, uint16_t version = 1) {
  std::vector<uint8_t> b = {'O', 'C', 'R', 'V', static_cast<uint8_t>(version),
                            static_cast<uint8_t>(version >> 8), 0, 0};
  for (uint32_t v : {world, rank})
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return b;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RendezvousError& e) {
    return e.what();
  }
  return "(no RendezvousError)";
}

}  // namespace

TEST_CASE("rendezvous: 3 ranks get the same 128 bytes from rank 0", "[rendezvous]") {
  const RendezvousId id = pattern_id();
  RendezvousServer server(kHost, 0, 3);
  const uint16_t port = server.port();
  REQUIRE(port != 0);
  // Both peers connect before rank 0 serves: they wait in the listen backlog.
  auto r1 = std::async(std::launch::async, [&] { return fetch_rendezvous_id(kHost, port, 3, 1, 10s); });
  auto r2 = std::async(std::launch::async, [&] { return fetch_rendezvous_id(kHost, port, 3, 2, 10s); });
  server.serve(id, 10s);
  const RendezvousId got1 = r1.get();
  const RendezvousId got2 = r2.get();
  CHECK(got1 == id);
  CHECK(got2 == id);
  CHECK(got1[0] == 3);
  CHECK(got1[127] == static_cast<uint8_t>(127 * 7 + 3));
}

TEST_CASE("rendezvous: peers started before rank 0 listens retry until it does",
          "[rendezvous]") {
  const RendezvousId id = pattern_id();
  const uint16_t port = free_port();
  auto r1 = std::async(std::launch::async, [&] {
    return exchange_rendezvous_id(kHost, port, 3, 1, RendezvousId{}, 10s);
  });
  auto r2 = std::async(std::launch::async, [&] {
    return exchange_rendezvous_id(kHost, port, 3, 2, RendezvousId{}, 10s);
  });
  std::this_thread::sleep_for(400ms);  // the peers meet "connection refused" meanwhile
  CHECK(exchange_rendezvous_id(kHost, port, 3, 0, id, 10s) == id);
  CHECK(r1.get() == id);
  CHECK(r2.get() == id);
  // One node: nothing to exchange.
  CHECK(exchange_rendezvous_id(kHost, port, 1, 0, id, 1s) == id);
}

TEST_CASE("rendezvous: a peer that never arrives times out with a message naming it",
          "[rendezvous]") {
  RendezvousServer server(kHost, 0, 3);
  const uint16_t port = server.port();
  auto r1 = std::async(std::launch::async, [&] {
    return message_of([&] { fetch_rendezvous_id(kHost, port, 3, 1, 10s); });
  });
  const std::string msg = message_of([&] { server.serve(pattern_id(), 700ms); });
  CHECK(msg == "rendezvous on 127.0.0.1:" + std::to_string(port) +
                   ": timed out after 0.7 s waiting for rank(s) 2 of world size 3 (1 of 2 peers "
                   "joined; check that every node was started with the same --nnodes and "
                   "--master-addr/--master-port)");
  // Rank 1 had joined; rank 0 giving up closes its connection, and rank 1 says so at once.
  const std::string msg1 = r1.get();
  CHECK(msg1.rfind("rendezvous: rank 1 of 3: rank 0 at 127.0.0.1:" + std::to_string(port) +
                       " closed the connection without a reply (",
                   0) == 0);
}

TEST_CASE("rendezvous: a peer with no rank 0 times out naming the address and the last error",
          "[rendezvous]") {
  const uint16_t port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = message_of([&] { fetch_rendezvous_id(kHost, port, 2, 1, 500ms); });
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(msg == "rendezvous: rank 1 of 2 timed out after 0.5 s waiting for rank 0 at 127.0.0.1:" +
                   std::to_string(port) +
                   " (last error: Connection refused; is node 0 started with the same "
                   "--master-addr/--master-port?)");
  CHECK(waited >= 500ms);  // it kept retrying until the deadline
}

TEST_CASE("rendezvous: garbage, short and silent clients are dropped while rank 0 keeps waiting",
          "[rendezvous]") {
  const RendezvousId id = pattern_id();
  RendezvousServer server(kHost, 0, 2);
  const uint16_t port = server.port();
  auto serving = std::async(std::launch::async, [&] { server.serve(id, 10s); });

  RawClient silent(port);  // connects and never sends a byte
  RawClient garbage(port);
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  garbage.send_bytes(std::vector<uint8_t>(http.begin(), http.end()));
  {
    RawClient shorty(port);
    shorty.send_bytes({'O', 'C', 'R', 'V', 1});
  }  // closed after 5 of 16 bytes
  bool eof = false;
  const std::vector<uint8_t> reply = garbage.read_up_to(16, 5s, &eof);
  CHECK(reply.empty());  // no reply at all, just closed
  CHECK(eof);

  // The real peer still gets the id, and rank 0 returns.
  CHECK(fetch_rendezvous_id(kHost, port, 2, 1, 10s) == id);
  REQUIRE(serving.wait_for(10s) == std::future_status::ready);
  serving.get();
  // The silent client was closed when rank 0 finished.
  CHECK(silent.read_up_to(1, 5s, &eof).empty());
  CHECK(eof);
}

TEST_CASE("rendezvous: wrong peers are refused with the reason, and rank 0 keeps waiting",
          "[rendezvous]") {
  const RendezvousId id = pattern_id();
  RendezvousServer server(kHost, 0, 3);
  const uint16_t port = server.port();
  auto serving = std::async(std::launch::async, [&] { server.serve(id, 10s); });
  const std::string at = "127.0.0.1:" + std::to_string(port);

  // A node started with another --nnodes.
  CHECK(message_of([&] { fetch_rendezvous_id(kHost, port, 2, 1, 10s); }) ==
        "rendezvous: rank 1 of 2: refused by rank 0 at " + at +
            ": rank 0 expects world size 3, this rank said 2 (check --nnodes and "
            "--tensor-parallel-size)");

  // Raw hellos: the reply is "OCRV", version 1, status (u16 LE), world size 3, 0.
  auto status_of = [&](const std::vector<uint8_t>& h) {
    RawClient c(port);
    c.send_bytes(h);
    bool eof = false;
    const std::vector<uint8_t> r = c.read_up_to(16, 5s, &eof);
    REQUIRE(r.size() == 16);
    CHECK(std::vector<uint8_t>(r.begin(), r.begin() + 6) ==
          std::vector<uint8_t>{'O', 'C', 'R', 'V', 1, 0});
    CHECK(r[8] == 3);  // rank 0's world size
    return r[6] | (r[7] << 8);
  };
  CHECK(status_of(hello(3, 5)) == 3);     // rank out of range
  CHECK(status_of(hello(3, 0)) == 3);     // rank 0 is the server itself
  CHECK(status_of(hello(3, 1, 2)) == 1);  // another protocol version

  // Two processes claiming rank 1: exactly one joins, the other is refused (status 4).
  RawClient a(port);
  a.send_bytes(hello(3, 1));
  RawClient b(port);
  b.send_bytes(hello(3, 1));
  bool eof_a = false, eof_b = false;
  // The refused one hears at once; the joined one waits for rank 2.
  std::vector<uint8_t> ra = a.read_up_to(16, 2s, &eof_a);
  std::vector<uint8_t> rb = b.read_up_to(16, 2s, &eof_b);
  REQUIRE(ra.size() + rb.size() == 16);
  const std::vector<uint8_t>& refused = ra.empty() ? rb : ra;
  RawClient& joined = ra.empty() ? a : b;
  CHECK((refused[6] | (refused[7] << 8)) == 4);

  CHECK(fetch_rendezvous_id(kHost, port, 3, 2, 10s) == id);
  bool eof = false;
  const std::vector<uint8_t> r = joined.read_up_to(16 + 128, 5s, &eof);
  REQUIRE(r.size() == 16 + 128);
  CHECK((r[6] | (r[7] << 8)) == 0);
  CHECK(std::equal(id.begin(), id.end(), r.begin() + 16));
  REQUIRE(serving.wait_for(10s) == std::future_status::ready);
  serving.get();
}

TEST_CASE("rendezvous: rank 0 cannot listen on an address that is not its own",
          "[rendezvous]") {
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never assigned to this machine.
  const std::string msg = message_of([] { RendezvousServer s("192.0.2.1", 29501, 2); });
  CHECK(msg ==
        "rendezvous: node 0 cannot listen on 192.0.2.1:29501: Cannot assign requested address "
        "(--master-addr must be this machine's address, --master-port a free port)");
  CHECK_THROWS_AS(RendezvousServer(kHost, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(fetch_rendezvous_id(kHost, 1, 3, 3, 1s), std::invalid_argument);
}

TEST_CASE("rendezvous: 30 idle connections do not delay the real peers", "[rendezvous]") {
  // A port scanner or stuck processes holding connections open without a hello: rank 0 reads
  // every hello concurrently with its own kHelloTimeout, so the real peers join at once and
  // well within the deadline (one at a time would take 30 x kHelloTimeout).
  const RendezvousId id = pattern_id();
  RendezvousServer server(kHost, 0, 3);
  const uint16_t port = server.port();
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(std::make_unique<RawClient>(port));
  const auto budget = 30 * kHelloTimeout / 2;
  auto serving = std::async(std::launch::async, [&] { server.serve(id, budget); });
  auto peer2 = std::async(std::launch::async,
                          [&] { return fetch_rendezvous_id(kHost, port, 3, 2, budget); });
  CHECK(fetch_rendezvous_id(kHost, port, 3, 1, budget) == id);
  CHECK(peer2.get() == id);
  REQUIRE(serving.wait_for(budget) == std::future_status::ready);
  serving.get();
}

TEST_CASE("rendezvous: a flood of idle connections beyond kMaxPendingHellos still lets the peer "
          "join",
          "[rendezvous]") {
  const RendezvousId id = pattern_id();
  RendezvousServer server(kHost, 0, 2);
  const uint16_t port = server.port();
  auto serving = std::async(std::launch::async, [&] { server.serve(id, 20s); });
  std::vector<std::unique_ptr<RawClient>> idle;
  for (size_t i = 0; i < kMaxPendingHellos + 8; ++i)
    idle.push_back(std::make_unique<RawClient>(port));
  bool eof = false;
  CHECK(idle.front()->read_up_to(1, 5s, &eof).empty());  // closed, with no reply
  CHECK(eof);
  CHECK(fetch_rendezvous_id(kHost, port, 2, 1, 20s) == id);
  REQUIRE(serving.wait_for(20s) == std::future_status::ready);
  serving.get();
}
