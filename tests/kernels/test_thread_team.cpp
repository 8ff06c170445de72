// ThreadTeam / parallel_for (kernels/cpu/thread_team.h): every index exactly once, the chunk
// boundaries the header states, nesting, concurrent callers, per-thread teams, workers that
// really take part, and idle workers that sleep instead of spinning.
#include <catch2/catch.hpp>

#include <omp.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cpu/thread_team.h"

using octet::cpu::parallel_for;
using octet::cpu::parallel_for_each;
using octet::cpu::ThreadTeam;

namespace {

// Restores the OpenMP nthreads setting (parallel_width's cap) on scope exit.
struct OmpThreads {
  int saved = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

// Scopes a thread team for the calling thread.
struct UseTeam {
  ThreadTeam* saved = octet::cpu::thread_team();
  explicit UseTeam(ThreadTeam* t) { octet::cpu::set_thread_team(t); }
  ~UseTeam() { octet::cpu::set_thread_team(saved); }
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

}  // namespace

TEST_CASE("ThreadTeam::run calls fn once per chunk at the stated boundaries", "[thread_team]") {
  ThreadTeam team(3);
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> seen;
  auto record = [&](int64_t lo, int64_t hi) {
    std::lock_guard lock(mu);
    CHECK(seen.insert({lo, hi}).second);
  };
  using Rec = decltype(record);
  auto fn = [](void* ctx, int64_t lo, int64_t hi) { (*static_cast<Rec*>(ctx))(lo, hi); };
  // begin + c * n / chunks for n = 10, chunks = 4: 0, 2, 5, 7, 10 (worked out by hand)
  team.run(0, 10, 4, fn, &record);
  CHECK(seen == std::set<std::pair<int64_t, int64_t>>{{0, 2}, {2, 5}, {5, 7}, {7, 10}});
  seen.clear();
  team.run(100, 103, 3, fn, &record);  // 100 + c * 3 / 3
  CHECK(seen == std::set<std::pair<int64_t, int64_t>>{{100, 101}, {101, 102}, {102, 103}});
}

TEST_CASE("parallel_for covers every index exactly once at any width", "[thread_team]") {
  OmpThreads cap(64);
  for (int size : {1, 2, 3, 4, 7}) {
    ThreadTeam team(size);
    UseTeam use(&team);
    CHECK(octet::cpu::parallel_width() == size);
    for (int64_t n : {0, 1, 2, 5, 16, 17, 1000, 100003}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n) + 3);
        parallel_for(3, 3 + n, [&](int64_t lo, int64_t hi) {
          CHECK(lo < hi);  // never an empty piece
          for (int64_t i = lo; i < hi; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
        });
        int64_t bad = 0;
        for (int64_t i = 0; i < 3; ++i) bad += hits[i].load() != 0;
        for (int64_t i = 3; i < 3 + n; ++i) bad += hits[i].load() != 1;
        INFO("size " << size << " n " << n << " rep " << rep);
        REQUIRE(bad == 0);
      }
    }
  }
}

TEST_CASE("parallel_for with parallel == false runs in order on the caller", "[thread_team]") {
  ThreadTeam team(4);
  UseTeam use(&team);
  std::vector<int64_t> order;
  const auto me = std::this_thread::get_id();
  parallel_for_each(0, 50, [&](int64_t i) {
    CHECK(std::this_thread::get_id() == me);
    order.push_back(i);
  }, false);
  std::vector<int64_t> expect;
  for (int64_t i = 0; i < 50; ++i) expect.push_back(i);
  CHECK(order == expect);
}

TEST_CASE("OpenMP's nthreads setting of 1 makes parallel_for run on the caller",
          "[thread_team]") {
  ThreadTeam team(4);
  UseTeam use(&team);
  OmpThreads one(1);
  CHECK(octet::cpu::parallel_width() == 1);
  const auto me = std::this_thread::get_id();
  std::atomic<int> others{0};
  parallel_for_each(0, 1000, [&](int64_t) { others += std::this_thread::get_id() != me; });
  CHECK(others == 0);
}

TEST_CASE("the team's workers take part", "[thread_team]") {
  OmpThreads cap(64);
  ThreadTeam team(2);
  UseTeam use(&team);
  // Chunk 0 waits (up to 20 s: the machine may be busy) until another chunk ran elsewhere.
  std::atomic<bool> other{false};
  const auto me = std::this_thread::get_id();
  std::atomic<int> waited_ok{0};
  parallel_for(0, 8, [&](int64_t lo, int64_t) {
    if (std::this_thread::get_id() != me) other = true;
    if (lo == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!other && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      waited_ok += other ? 1 : 0;
    }
  });
  CHECK(other);
}

TEST_CASE("a nested parallel_for runs on its thread and completes", "[thread_team]") {
  OmpThreads cap(64);
  ThreadTeam team(3);
  UseTeam use(&team);
  std::vector<std::atomic<int>> hits(40 * 40);
  parallel_for_each(0, 40, [&](int64_t i) {
    const auto me = std::this_thread::get_id();
    parallel_for_each(0, 40, [&](int64_t j) {
      CHECK(std::this_thread::get_id() == me);
      hits[i * 40 + j]++;
    });
  });
  int64_t bad = 0;
  for (auto& h : hits) bad += h.load() != 1;
  CHECK(bad == 0);
}

TEST_CASE("two threads sharing one team both get every index", "[thread_team]") {
  OmpThreads cap(64);
  ThreadTeam team(3);
  std::atomic<int64_t> bad{0};
  auto caller = [&] {
    UseTeam use(&team);
    OmpThreads cap_here(64);  // OpenMP settings are per thread
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(997);
      parallel_for_each(0, 997, [&](int64_t i) { hits[i]++; });
      for (auto& h : hits) bad += h.load() != 1;
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  CHECK(bad == 0);
}

TEST_CASE("each thread's own team: rank-style teams run concurrently", "[thread_team]") {
  std::atomic<int64_t> bad{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      OmpThreads cap(64);
      ThreadTeam team(r + 1);
      UseTeam use(&team);
      if (octet::cpu::parallel_width() != r + 1) bad += 1000;
      for (int rep = 0; rep < 100; ++rep) {
        std::vector<std::atomic<int>> hits(513);
        parallel_for_each(0, 513, [&](int64_t i) { hits[i]++; });
        for (auto& h : hits) bad += h.load() != 1;
      }
    });
  for (auto& t : ranks) t.join();
  CHECK(bad == 0);
}

TEST_CASE("idle workers sleep instead of spinning", "[thread_team]") {
  OmpThreads cap(64);
  ThreadTeam team(4);
  UseTeam use(&team);
  std::vector<std::atomic<int>> hits(4096);
  parallel_for_each(0, 4096, [&](int64_t i) { hits[i]++; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the bounded spin
  const double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double used = cpu_seconds() - before;
  // Three spinning workers would burn up to ~0.9 CPU-seconds here; sleeping ones next to none.
  INFO("CPU seconds used while idle: " << used);
  CHECK(used < 0.05);
}
