// The in-process Communicator (kernels/cpu/thread_communicator.h): every collective at world
// sizes 1..4 against values the test computes itself, bit-identical all-reduce results on every
// rank, many collectives in a row (no deadlock, no lost wake-up), and exceptions that cross ranks.
#include <atomic>
#include <bit>
#include <csignal>
#include <functional>
#include <thread>
#include <utility>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "kernels/bf16_sum_cases.h"
#include "kernels/cpu/thread_communicator.h"

using octet::Communicator;
using octet::cpu::CommunicatorAborted;
using octet::cpu::RankThreads;
using octet::cpu::run_on_ranks;

namespace {

/// A value of rank r's element i whose rank-order sum is order-sensitive in FP32 (mixed
/// magnitudes), so a reduction in another order would differ in the last bits.
float value(int rank, int64_t i) {
  const float mag = (rank % 2 == 0) ? 1e4f : 1e-3f;
  return mag * std::sin(0.37f * static_cast<float>(i + 1) + 1.3f * static_cast<float>(rank)) +
         0.1f * static_cast<float>(rank);
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Counts with tails: not divisible by 2, 3 or 4 (chunked reduction), and zero.
const int64_t kCounts[] = {0, 1, 7, 64, 1001};

}  // namespace

TEST_CASE("all_reduce_sum gives every rank the rank-order sum bit for bit", "[comm]") {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t count : kCounts) {
      CAPTURE(world, count);
      std::vector<float> expected(count);
      for (int64_t i = 0; i < count; ++i) {
        float acc = value(0, i);
        for (int r = 1; r < world; ++r) acc += value(r, i);  // ((v0 + v1) + v2) + v3
        expected[i] = acc;
      }
      std::vector<std::vector<float>> result(world);
      std::vector<int> seen_rank(world, -1), seen_world(world, -1);
      run_on_ranks(world, [&](int rank, Communicator& comm) {
        seen_rank[rank] = comm.rank();  // checked after the join: Catch2 v2 is not thread-safe
        seen_world[rank] = comm.world_size();
        std::vector<float> buf(count);
        for (int64_t i = 0; i < count; ++i) buf[i] = value(rank, i);
        comm.all_reduce_sum(buf.data(), count);
        result[rank] = std::move(buf);
      });
      for (int r = 0; r < world; ++r) {
        REQUIRE(seen_rank[r] == r);
        REQUIRE(seen_world[r] == world);
        REQUIRE(result[r].size() == static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) REQUIRE(bits(result[r][i]) == bits(expected[i]));
      }
    }
  }
}

TEST_CASE("the rank-order sum is order-sensitive for the test's data", "[comm]") {
  // Guards the test above: if any order gave the same bits it could not catch a wrong order.
  int differ = 0;
  for (int64_t i = 0; i < 1001; ++i) {
    const float fwd = ((value(0, i) + value(1, i)) + value(2, i)) + value(3, i);
    const float rev = ((value(3, i) + value(2, i)) + value(1, i)) + value(0, i);
    differ += bits(fwd) != bits(rev);
  }
  REQUIRE(differ > 10);
}

TEST_CASE("all_reduce_sum_bf16: the hand-worked cases (ties, RNE, negatives, inf, NaN)",
          "[comm][bf16]") {
  for (int world : {2, 3}) {
    const octet_test::Bf16CaseBuffers cases = octet_test::bf16_case_buffers(world);
    const int64_t count = static_cast<int64_t>(cases.want.size());
    REQUIRE(count > 0);
    std::vector<std::vector<uint16_t>> result(world);
    run_on_ranks(world, [&](int rank, Communicator& comm) {
      std::vector<uint16_t> buf = cases.per_rank[rank];
      comm.all_reduce_sum_bf16(buf.data(), count);
      result[rank] = std::move(buf);
    });
    for (int64_t e = 0; e < count; ++e) {
      INFO("world " << world << ": " << cases.what[e] << ", want 0x" << std::hex << cases.want[e]
                    << ", rank 0 got 0x" << result[0][e]);
      // The hand value is the independent reference's too (guards the table).
      std::vector<uint16_t> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(cases.per_rank[r][e]);
      CHECK(octet_test::reference_bf16_sum(inputs) == cases.want[e]);
      for (int r = 0; r < world; ++r) CHECK(result[r][e] == cases.want[e]);
    }
  }
}

TEST_CASE("all_reduce_sum_bf16 gives every rank the rank-order FP32 sum rounded once",
          "[comm][bf16]") {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t count : kCounts) {
      CAPTURE(world, count);
      std::vector<std::vector<uint16_t>> result(world);
      run_on_ranks(world, [&](int rank, Communicator& comm) {
        std::vector<uint16_t> buf(count);
        for (int64_t i = 0; i < count; ++i) buf[i] = octet_test::bf16_bulk_value(rank, i);
        comm.all_reduce_sum_bf16(buf.data(), count);
        result[rank] = std::move(buf);
      });
      int64_t bad = 0, rounded = 0;
      for (int64_t i = 0; i < count; ++i) {
        std::vector<uint16_t> inputs;
        float exact = 0.0f;
        for (int r = 0; r < world; ++r) {
          inputs.push_back(octet_test::bf16_bulk_value(r, i));
          exact += std::bit_cast<float>(static_cast<uint32_t>(inputs.back()) << 16);
        }
        const uint16_t want = octet_test::reference_bf16_sum(inputs);  // world 1: the input
        rounded += (static_cast<uint32_t>(want) << 16) != std::bit_cast<uint32_t>(exact);
        for (int r = 0; r < world; ++r) bad += result[r][i] != want;
      }
      CHECK(bad == 0);
      // Most sums need rounding (the test is not about BF16-exact values alone).
      if (world > 1 && count > 7) CHECK(rounded > count / 2);
    }
  }
}

TEST_CASE("all_reduce_max is the element-wise max with NaN ignored", "[comm]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int world : {1, 2, 3, 4}) {
    for (int64_t count : kCounts) {
      CAPTURE(world, count);
      // rank r, element i: NaN on rank (i % world) when i % 5 == 0, else value(r, i).
      auto input = [&](int r, int64_t i) {
        return (i % 5 == 0 && r == i % world && world > 1) ? nan : value(r, i);
      };
      std::vector<std::vector<float>> result(world);
      run_on_ranks(world, [&](int rank, Communicator& comm) {
        std::vector<float> buf(count);
        for (int64_t i = 0; i < count; ++i) buf[i] = input(rank, i);
        comm.all_reduce_max(buf.data(), count);
        result[rank] = std::move(buf);
      });
      for (int64_t i = 0; i < count; ++i) {
        float m = -std::numeric_limits<float>::infinity();
        for (int r = 0; r < world; ++r)
          if (!std::isnan(input(r, i)) && input(r, i) > m) m = input(r, i);
        for (int r = 0; r < world; ++r) REQUIRE(bits(result[r][i]) == bits(m));
      }
    }
  }
}

TEST_CASE("all_gather concatenates the ranks' buffers in rank order", "[comm]") {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t count : kCounts) {
      CAPTURE(world, count);
      std::vector<std::vector<float>> result(world);
      run_on_ranks(world, [&](int rank, Communicator& comm) {
        std::vector<float> send(count);
        for (int64_t i = 0; i < count; ++i) send[i] = value(rank, i);
        std::vector<float> recv(world * count, -1.0f);
        comm.all_gather(send.data(), count, recv.data());
        result[rank] = std::move(recv);
      });
      for (int r = 0; r < world; ++r)
        for (int src = 0; src < world; ++src)
          for (int64_t i = 0; i < count; ++i)
            REQUIRE(bits(result[r][src * count + i]) == bits(value(src, i)));
    }
  }
}

TEST_CASE("all_gather in place (send inside recv at the rank's offset)", "[comm]") {
  for (int world : {1, 2, 3, 4}) {
    const int64_t count = 13;
    std::vector<std::vector<float>> result(world);
    run_on_ranks(world, [&](int rank, Communicator& comm) {
      std::vector<float> recv(world * count, -1.0f);
      for (int64_t i = 0; i < count; ++i) recv[rank * count + i] = value(rank, i);
      comm.all_gather(recv.data() + rank * count, count, recv.data());
      result[rank] = std::move(recv);
    });
    for (int r = 0; r < world; ++r)
      for (int src = 0; src < world; ++src)
        for (int64_t i = 0; i < count; ++i)
          REQUIRE(result[r][src * count + i] == value(src, i));
  }
}

TEST_CASE("broadcast copies the root's bytes to every rank", "[comm]") {
  for (int world : {1, 2, 3, 4}) {
    for (int root = 0; root < world; ++root) {
      CAPTURE(world, root);
      const int64_t bytes = 37;  // not a multiple of 4: raw bytes
      std::vector<std::vector<uint8_t>> result(world);
      run_on_ranks(world, [&](int rank, Communicator& comm) {
        std::vector<uint8_t> buf(bytes);
        for (int64_t i = 0; i < bytes; ++i) buf[i] = static_cast<uint8_t>(rank * 50 + i);
        comm.broadcast(buf.data(), bytes, root);
        result[rank] = std::move(buf);
      });
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < bytes; ++i)
          REQUIRE(result[r][i] == static_cast<uint8_t>(root * 50 + i));
    }
  }
}

TEST_CASE("world size 1 is a no-op communicator", "[comm]") {
  auto comms = octet::cpu::make_thread_communicators(1);
  REQUIRE(comms.size() == 1);
  Communicator& c = *comms[0];
  REQUIRE(c.rank() == 0);
  REQUIRE(c.world_size() == 1);
  std::vector<float> buf = {1.5f, -2.0f, 3.25f};
  c.all_reduce_sum(buf.data(), 3);
  c.all_reduce_max(buf.data(), 3);
  REQUIRE(buf == std::vector<float>{1.5f, -2.0f, 3.25f});
  std::vector<uint16_t> bf16 = {0x3F81, 0x7FC1, 0x8000};  // a NaN payload kept as is
  c.all_reduce_sum_bf16(bf16.data(), 3);
  REQUIRE(bf16 == std::vector<uint16_t>{0x3F81, 0x7FC1, 0x8000});
  std::vector<float> recv(3);
  c.all_gather(buf.data(), 3, recv.data());
  REQUIRE(recv == buf);
  c.broadcast(buf.data(), 12, 0);
  REQUIRE(buf == std::vector<float>{1.5f, -2.0f, 3.25f});
  // run_on_ranks(1) runs on the calling thread.
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  run_on_ranks(1, [&](int, Communicator&) { ran_on = std::this_thread::get_id(); });
  REQUIRE(ran_on == caller);
}

TEST_CASE("thousands of mixed collectives in a row neither deadlock nor mix up", "[comm]") {
  // Catch2 v2 assertions are not thread-safe: ranks count their mismatches, checked after join.
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    const int kIters = 3000;  // ~4 barrier rounds each; bounded, a few hundred ms
    std::atomic<int> wrong{0};
    RankThreads ranks(world);
    ranks.run([&](int rank, Communicator& comm) {
      std::vector<float> buf(5), recv(5 * world);
      for (int it = 0; it < kIters; ++it) {
        const int64_t n = 1 + it % 5;  // varying counts: reuse of the scratch
        for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(rank + it + i);
        comm.all_reduce_sum(buf.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          // sum over r of (r + it + i), small integers: exact in FP32
          const float want = static_cast<float>(world * (it + i) + world * (world - 1) / 2);
          if (buf[i] != want) ++wrong;
        }
        // BF16: small integers, exact (a float's top half); rank + 1 and 2 on each rank.
        const auto bf16 = [](float v) {
          return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
        };
        uint16_t h[2] = {bf16(static_cast<float>(rank + 1)), bf16(2.0f)};
        comm.all_reduce_sum_bf16(h, 2);
        if (h[0] != bf16(static_cast<float>(world * (world + 1) / 2)) || h[1] != bf16(2.0f * world))
          ++wrong;
        float m = static_cast<float>(rank * it);
        comm.all_reduce_max(&m, 1);
        if (m != static_cast<float>((world - 1) * it)) ++wrong;
        float x = static_cast<float>(rank + 10 * it);
        comm.all_gather(&x, 1, recv.data());
        for (int r = 0; r < world; ++r)
          if (recv[r] != static_cast<float>(r + 10 * it)) ++wrong;
        int32_t token = rank == it % world ? it : -1;
        comm.broadcast(&token, sizeof token, it % world);
        if (token != it) ++wrong;
      }
    });
    REQUIRE(wrong == 0);
    // The same threads run again.
    std::atomic<int> runs{0};
    for (int k = 0; k < 200; ++k)
      ranks.run([&](int, Communicator& comm) {
        float one = 1.0f;
        comm.all_reduce_sum(&one, 1);
        if (one == static_cast<float>(world)) ++runs;
      });
    REQUIRE(runs == 200 * world);
  }
}

TEST_CASE("an exception on one rank reaches the caller and wakes the peers in a collective",
          "[comm]") {
  for (int world : {2, 3, 4}) {
    for (int thrower = 0; thrower < world; ++thrower) {
      CAPTURE(world, thrower);
      std::atomic<int> aborted_peers{0};
      auto body = [&](int rank, Communicator& comm) {
        float x = 1.0f;
        comm.all_reduce_sum(&x, 1);  // one collective that succeeds
        if (rank == thrower)
          throw std::invalid_argument("rank " + std::to_string(rank) + " failed");
        try {
          comm.all_reduce_sum(&x, 1);  // blocks until the thrower's abort wakes it
        } catch (const CommunicatorAborted&) {
          ++aborted_peers;
          throw;
        }
      };
      try {
        run_on_ranks(world, body);
        FAIL("no exception");
      } catch (const std::invalid_argument& e) {
        REQUIRE(std::string(e.what()) == "rank " + std::to_string(thrower) + " failed");
      }
      REQUIRE(aborted_peers == world - 1);

      // RankThreads: the same, and the next run works (the abort is cleared).
      aborted_peers = 0;
      RankThreads ranks(world);
      REQUIRE_THROWS_WITH(ranks.run(body), "rank " + std::to_string(thrower) + " failed");
      REQUIRE(aborted_peers == world - 1);
      std::atomic<int> ok{0};
      ranks.run([&](int, Communicator& comm) {
        float x = 2.0f;
        comm.all_reduce_sum(&x, 1);
        if (x == 2.0f * static_cast<float>(world)) ++ok;
      });
      REQUIRE(ok == world);
    }
  }
}

TEST_CASE("an exception with no collective pending still propagates", "[comm]") {
  REQUIRE_THROWS_WITH(run_on_ranks(1, [](int, Communicator&) { throw std::runtime_error("w1"); }),
                      "w1");
  RankThreads ranks(3);
  REQUIRE_THROWS_WITH(ranks.run([](int rank, Communicator&) {
                        if (rank == 2) throw std::runtime_error("last rank");
                      }),
                      "last rank");
}

namespace {

/// Runs fn in a forked child with stderr captured; returns (terminated by SIGABRT, stderr text).
std::pair<bool, std::string> run_in_child(const std::function<void()>& fn) {
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child: default SIGABRT (not Catch's handler), quiet stdout
    std::signal(SIGABRT, SIG_DFL);
    close(pipefd[0]);
    dup2(pipefd[1], 2);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    fn();
    _exit(0);
  }
  close(pipefd[1]);
  std::string err;
  char chunk[512];
  ssize_t n;
  while ((n = read(pipefd[0], chunk, sizeof chunk)) > 0) err.append(chunk, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, err};
}

}  // namespace

TEST_CASE("ranks disagreeing on a collective is a broken invariant (abort naming both)",
          "[comm]") {
  auto [aborted, err] = run_in_child([] {
    run_on_ranks(2, [](int rank, Communicator& comm) {
      std::vector<float> buf(8);
      comm.all_reduce_sum(buf.data(), rank == 0 ? 8 : 7);
    });
  });
  REQUIRE(aborted);
  REQUIRE_THAT(err, Catch::Contains("rank 0 called all_reduce_sum(count 8") &&
                        Catch::Contains("rank 1 called all_reduce_sum(count 7"));

  // One rank ending its run while a peer waits in a collective: an abort, not a hang.
  auto [aborted2, err2] = run_in_child([] {
    run_on_ranks(2, [](int rank, Communicator& comm) {
      float x = 0, recv[2];
      if (rank == 1) comm.all_gather(&x, 1, recv);
    });
  });
  REQUIRE(aborted2);
  REQUIRE_THAT(err2, Catch::Contains("the end of the run") && Catch::Contains("all_gather"));
}
