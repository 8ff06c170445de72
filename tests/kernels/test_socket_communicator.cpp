// The TCP Communicator (kernels/cpu/socket_communicator.h), its ranks on threads of this
// process over 127.0.0.1: every collective against values the test computes itself, all-reduce
// bit-identical to the in-process ThreadCommunicator's, a lost peer that fails the survivors
// (now and on every later call) instead of hanging them, and refused or timed-out joins.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/bf16_sum_cases.h"
#include "kernels/cpu/socket_communicator.h"
#include "kernels/cpu/thread_communicator.h"

using octet::Communicator;
using octet::cpu::PeerLost;
using octet::cpu::SocketCommunicator;
using namespace std::chrono_literals;

namespace {

/// A port nothing listens on now (bound to 0, read back, released).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

/// Mixed magnitudes: a sum in another order than 0, 1, ..., N-1 differs in the last bits.
float value(int rank, int64_t i) {
  const float mag = (rank % 2 == 0) ? 1e4f : 1e-3f;
  return mag * std::sin(0.37f * static_cast<float>(i + 1) + 1.3f * static_cast<float>(rank)) +
         0.1f * static_cast<float>(rank);
}

/// Runs fn(rank, comm) on world threads, each with its own SocketCommunicator of one group;
/// rethrows the first exception.
void run_socket_ranks(int world, const std::function<void(int, SocketCommunicator&)>& fn) {
  const int port = free_port();
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        SocketCommunicator comm("127.0.0.1", port, r, world, 20s, "test");
        fn(r, comm);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace

TEST_CASE("socket communicator: all_reduce_sum adds in rank order, bit for bit as the "
          "thread communicator") {
  for (int world : {2, 3}) {
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
      INFO("world " << world << ", count " << count);
      // The rank-order expression written out: ((b0 + b1) + b2).
      std::vector<float> expect(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        float s = value(0, i);
        for (int r = 1; r < world; ++r) s = s + value(r, i);
        expect[i] = s;
      }
      // The in-process group's answer.
      std::vector<std::vector<float>> threaded(static_cast<size_t>(world));
      octet::cpu::run_on_ranks(world, [&](int r, Communicator& comm) {
        std::vector<float> b(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) b[i] = value(r, i);
        comm.all_reduce_sum(b.data(), count);
        threaded[r] = b;
      });
      std::vector<std::vector<float>> got(static_cast<size_t>(world));
      run_socket_ranks(world, [&](int r, SocketCommunicator& comm) {
        CHECK(comm.rank() == r);
        CHECK(comm.world_size() == world);
        std::vector<float> b(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) b[i] = value(r, i);
        comm.all_reduce_sum(b.data(), count);
        got[r] = b;
      });
      for (int r = 0; r < world; ++r) {
        REQUIRE(got[r].size() == expect.size());
        CHECK(std::memcmp(got[r].data(), expect.data(), expect.size() * 4) == 0);
        CHECK(std::memcmp(got[r].data(), threaded[r].data(), expect.size() * 4) == 0);
      }
    }
  }
}

TEST_CASE("socket communicator: all_reduce_sum_bf16, the hand-worked cases and the rank-order "
          "FP32 sum rounded once, bit for bit as the thread communicator") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    const octet_test::Bf16CaseBuffers cases = octet_test::bf16_case_buffers(world);
    const int64_t hand = static_cast<int64_t>(cases.want.size());
    REQUIRE(hand > 0);
    const int64_t count = hand + 100003;  // the hand cases, then bulk values
    auto input = [&](int r, int64_t i) {
      return i < hand ? cases.per_rank[r][i] : octet_test::bf16_bulk_value(r, i);
    };
    std::vector<uint16_t> expect(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      std::vector<uint16_t> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(input(r, i));
      expect[i] = i < hand ? cases.want[i] : octet_test::reference_bf16_sum(inputs);
    }
    std::vector<std::vector<uint16_t>> threaded(static_cast<size_t>(world));
    octet::cpu::run_on_ranks(world, [&](int r, Communicator& comm) {
      std::vector<uint16_t> b(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) b[i] = input(r, i);
      comm.all_reduce_sum_bf16(b.data(), count);
      threaded[r] = b;
    });
    std::vector<std::vector<uint16_t>> got(static_cast<size_t>(world));
    run_socket_ranks(world, [&](int r, SocketCommunicator& comm) {
      std::vector<uint16_t> b(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) b[i] = input(r, i);
      comm.all_reduce_sum_bf16(b.data(), count);
      comm.all_reduce_sum_bf16(b.data(), 0);  // nothing, and the group stays in step
      got[r] = b;
    });
    for (int64_t e = 0; e < hand; ++e) {
      INFO(cases.what[e] << ": want 0x" << std::hex << cases.want[e] << ", rank 0 got 0x"
                         << got[0][e]);
      CHECK(got[0][e] == cases.want[e]);
    }
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r);
      REQUIRE(got[r].size() == expect.size());
      CHECK(std::memcmp(got[r].data(), expect.data(), expect.size() * 2) == 0);
      CHECK(std::memcmp(got[r].data(), threaded[r].data(), expect.size() * 2) == 0);
    }
  }
}

TEST_CASE("socket communicator: max, gather, broadcast and byte broadcast") {
  const int world = 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  run_socket_ranks(world, [&](int r, SocketCommunicator& comm) {
    // max, NaN ignored as fmaxf: element 0 is NaN on rank 1, element 1 a number on rank 1
    // only, element 3 NaN everywhere (stays NaN).
    std::vector<float> m = {static_cast<float>(r), 5.0f + r, -static_cast<float>(r), nan};
    if (r == 1) m[0] = nan;
    if (r != 1) m[1] = nan;
    comm.all_reduce_max(m.data(), 4);
    CHECK(m[0] == 2.0f);
    CHECK(m[1] == 6.0f);
    CHECK(m[2] == 0.0f);
    CHECK(std::isnan(m[3]));

    // all_gather, out of place and in place.
    std::vector<float> send = {10.0f * r, 10.0f * r + 1};
    std::vector<float> recv(6, -1.0f);
    comm.all_gather(send.data(), 2, recv.data());
    CHECK(recv == std::vector<float>{0, 1, 10, 11, 20, 21});
    std::vector<float> inplace(6, -1.0f);
    inplace[2 * r] = 100.0f + r;
    inplace[2 * r + 1] = 200.0f + r;
    comm.all_gather(inplace.data() + 2 * r, 2, inplace.data());
    CHECK(inplace == std::vector<float>{100, 200, 101, 201, 102, 202});

    // broadcast from every root (a root other than 0 goes through rank 0).
    for (int root = 0; root < world; ++root) {
      int64_t v[2] = {r == root ? 1000 + root : -1, r == root ? -7 : 0};
      comm.broadcast(v, sizeof v, root);
      CHECK(v[0] == 1000 + root);
      CHECK(v[1] == -7);
    }
    // bytes of any length, empty included.
    for (size_t n : {size_t{0}, size_t{5}, size_t{300000}}) {
      std::vector<uint8_t> expect;
      for (size_t i = 0; i < n; ++i) expect.push_back(static_cast<uint8_t>(i * 7 + 3));
      std::vector<uint8_t> bytes = r == 1 ? expect : std::vector<uint8_t>(9, 0xEE);
      comm.broadcast_bytes(bytes, 1);
      CHECK(bytes == expect);
    }
  });
}

TEST_CASE("socket communicator: a lost peer fails the others at once and on every later call") {
  for (int dying : {0, 1}) {
    INFO("rank " << dying << " leaves");
    std::vector<std::string> errors(3);
    run_socket_ranks(3, [&](int r, SocketCommunicator& comm) {
      std::vector<float> b(1000, 1.0f);
      comm.all_reduce_sum(b.data(), 1000);
      CHECK(b[0] == 3.0f);
      if (r == dying) return;  // closes its sockets mid-run (a killed process's kernel does)
      try {
        comm.all_reduce_sum(b.data(), 1000);
        errors[r] = "(no error)";
      } catch (const PeerLost& e) {
        errors[r] = e.what();
      }
      // Broken for good: the next call throws without touching the network.
      CHECK_THROWS_AS(comm.broadcast(b.data(), 4, 0), PeerLost);
    });
    for (int r = 0; r < 3; ++r) {
      if (r == dying) continue;
      INFO(errors[r]);
      CHECK_THAT(errors[r], Catch::Contains("lost its connection to rank"));
      CHECK_THAT(errors[r], Catch::Contains("(test)"));
    }
  }
}

TEST_CASE("socket communicator: a live peer that stops answering is lost after the silence "
          "timeout") {
  // Rank 1 stays connected but never joins the second collective (a stopped process: its
  // kernel keeps the connection up). Rank 0 must give up after its silence timeout instead of
  // waiting for ever; rank 1 then finds the group broken.
  std::string error = "(no error)";
  std::chrono::steady_clock::duration waited{};
  run_socket_ranks(2, [&](int r, SocketCommunicator& comm) {
    comm.set_silence_timeout(300ms);
    std::vector<float> b(16, 1.0f);
    comm.all_reduce_sum(b.data(), 16);
    CHECK(b[0] == 2.0f);
    if (r == 1) {
      std::this_thread::sleep_for(1500ms);
      CHECK_THROWS_AS(comm.all_reduce_sum(b.data(), 16), PeerLost);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      comm.all_reduce_sum(b.data(), 16);
    } catch (const PeerLost& e) {
      error = e.what();
    }
    waited = std::chrono::steady_clock::now() - t0;
  });
  INFO(error);
  CHECK_THAT(error, Catch::Contains("lost its connection to rank 1"));
  CHECK_THAT(error, Catch::Contains("alive but not answering"));
  CHECK(waited >= 250ms);
  CHECK(waited < 1400ms);  // gave up before rank 1 came back
}

TEST_CASE("socket communicator: joins that are refused or time out say why") {
  const int port = free_port();
  std::string node0_error, node2_error;
  std::thread node0([&] {
    try {
      SocketCommunicator c("127.0.0.1", port, 0, 2, 3s, "test");
    } catch (const std::runtime_error& e) {
      node0_error = e.what();
    }
  });
  // A peer with another world size is refused with the reason; node 0 keeps waiting and then
  // times out naming the rank that never came.
  std::this_thread::sleep_for(200ms);
  try {
    SocketCommunicator c("127.0.0.1", port, 2, 3, 10s, "test");
  } catch (const std::runtime_error& e) {
    node2_error = e.what();
  }
  node0.join();
  CHECK_THAT(node2_error, Catch::Contains("refused by node 0") && Catch::Contains("--nnodes"));
  CHECK_THAT(node0_error, Catch::Contains("timed out") && Catch::Contains("waiting for node(s) 1"));
  // A peer with no node 0 times out naming the address.
  try {
    SocketCommunicator c("127.0.0.1", free_port(), 1, 2, 500ms, "test");
    FAIL("joined without a node 0");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("timed out") && Catch::Contains("connecting to node 0"));
  }
  CHECK_THROWS_AS(SocketCommunicator("127.0.0.1", 0, 0, 2, 1s, "test"), std::invalid_argument);
  CHECK_THROWS_AS(SocketCommunicator("127.0.0.1", port, 2, 2, 1s, "test"), std::invalid_argument);
}

TEST_CASE("socket communicator: idle connections do not delay the real peers' joins") {
  // 30 connections that never send a byte (a port scanner, a stuck process) reach node 0
  // before the real peers. Node 0 used to read one hello at a time, 10 s each: 300 s, far past
  // the join deadlines. It now reads them all at once, each with its own 2 s.
  const int port = free_port();
  std::vector<std::string> errors(3, "(did not finish)");
  std::vector<float> sums(3, 0.0f);
  auto rank = [&](int r) {
    try {
      // The peers give up first (15 s): joined late is not joined (node 0 used to let them in
      // after its own deadline, by draining its backlog).
      SocketCommunicator c("127.0.0.1", port, r, 3, r == 0 ? 20s : 15s, "test");
      std::vector<float> b{1.0f};
      c.all_reduce_sum(b.data(), 1);
      sums[r] = b[0];
      errors[r].clear();
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  };
  std::thread node0(rank, 0);
  std::vector<int> idle;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  for (int i = 0; i < 30; ++i) {
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {  // node 0 may not listen yet
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        fd = -1;
        std::this_thread::sleep_for(50ms);
      }
    }
    if (fd >= 0) idle.push_back(fd);
  }
  std::thread node1(rank, 1), node2(rank, 2);
  node1.join();
  node2.join();
  node0.join();
  for (int fd : idle) close(fd);
  CHECK(idle.size() == 30);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
    CHECK(sums[r] == 3.0f);
  }
}
