// Scheduler: per-step tables of (request, tokens scheduled), the TensorRT-LLM scenario style.
// Each step runs as the engine does: schedule(), then a sampled token is appended to every
// request whose scheduled tokens reached its end, then update(). Expected tables, block ids and
// counters are derived by hand in the comments from the rules in scheduler.h (block_size 4;
// a fresh pool hands out blocks 1, 2, 3, ... in order).
#include <catch2/catch.hpp>

#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.h"

using namespace octet;
using Plan = std::vector<std::pair<std::string, int64_t>>;
using Ids = std::vector<int32_t>;
using Names = std::vector<std::string>;

namespace {

struct Step {
  Plan plan;
  Names preempted, finished;
  int64_t total = 0;
};

// An engine without a model: appends token 1000 + (tokens so far) as the sampled token.
struct Harness {
  KVCacheManager kv;
  Scheduler sched;

  Harness(SchedulerConfig cfg, int64_t num_blocks, bool prefix_caching = false)
      : kv(num_blocks, 4, prefix_caching, 0, cfg.max_model_len), sched(cfg, kv) {}

  void add(const std::string& id, std::vector<int32_t> prompt, int64_t priority = 0) {
    sched.add_request(std::make_unique<Request>(id, std::move(prompt), SamplingParams{},
                                                priority));
  }

  Step step() {
    SchedulerOutput out = sched.schedule();
    Step s;
    REQUIRE(out.scheduled.size() == out.num_scheduled_tokens.size());
    for (size_t k = 0; k < out.scheduled.size(); ++k) {
      Request* r = out.scheduled[k];
      s.plan.emplace_back(r->request_id, out.num_scheduled_tokens[k]);
      if (r->num_computed_tokens + out.num_scheduled_tokens[k] == r->num_tokens())
        r->append_output_token(static_cast<int32_t>(1000 + r->num_tokens()));
    }
    s.preempted = out.preempted_ids;
    s.finished = out.finished_ids;
    s.total = out.total_num_scheduled_tokens;
    sched.update(out);
    return s;
  }

  const Ids& blocks(const std::string& id) const { return kv.get_block_ids(id); }
};

std::vector<int32_t> tokens(int32_t first, int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

SchedulerConfig config(int64_t budget, int64_t max_model_len, int64_t max_num_seqs = 256,
                       bool chunked = true, const char* policy = "fcfs") {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_model_len = max_model_len;
  c.max_num_seqs = max_num_seqs;
  c.enable_chunked_prefill = chunked;
  c.scheduling_policy = policy;
  return c;
}

}  // namespace

TEST_CASE("chunked prefill: prompts of 10, 3 and 5 tokens under a budget of 8", "[scheduler]") {
  Harness h(config(8, 32), 64);
  h.add("A", tokens(100, 10));
  h.add("B", tokens(200, 3));
  h.add("C", tokens(300, 5));
  // Step 1: A takes the whole budget (8 of its 10 prompt tokens).
  Step s1 = h.step();
  CHECK(s1.plan == Plan{{"A", 8}});
  CHECK(s1.total == 8);
  CHECK(h.blocks("A") == Ids{1, 2});
  CHECK(h.sched.get("A")->num_computed_tokens == 8);
  CHECK(h.sched.get("A")->output_token_ids.empty());
  // Step 2: A's last 2 prompt tokens, B's 3, C's first 3 of 5 (budget 8 - 2 - 3 = 3).
  Step s2 = h.step();
  CHECK(s2.plan == Plan{{"A", 2}, {"B", 3}, {"C", 3}});
  CHECK(s2.total == 8);
  CHECK(h.blocks("A") == Ids{1, 2, 3});
  CHECK(h.blocks("B") == Ids{4});
  CHECK(h.blocks("C") == Ids{5});
  // Step 3: A and B decode 1 token each; C finishes its prompt (2).
  Step s3 = h.step();
  CHECK(s3.plan == Plan{{"A", 1}, {"B", 1}, {"C", 2}});
  CHECK(s3.total == 4);
  CHECK(h.blocks("C") == Ids{5, 6});  // 5 tokens -> 2 blocks
  // Step 4: all decode. B reaches 5 tokens -> its second block, 7.
  Step s4 = h.step();
  CHECK(s4.plan == Plan{{"A", 1}, {"B", 1}, {"C", 1}});
  CHECK(h.blocks("A") == Ids{1, 2, 3});
  CHECK(h.blocks("B") == Ids{4, 7});
  CHECK(h.blocks("C") == Ids{5, 6});

  // A: 10 prompt + outputs from steps 2, 3, 4; computed 12 of 13.
  const Request* a = h.sched.get("A");
  CHECK(a->num_output_tokens() == 3);
  CHECK(a->num_computed_tokens == 12);
  CHECK(a->num_cached_tokens == 0);
  CHECK(a->status == RequestStatus::Running);
  CHECK(h.sched.get("B")->num_computed_tokens == 5);
  CHECK(h.sched.get("C")->num_computed_tokens == 6);
  CHECK(h.sched.get("C")->num_output_tokens() == 2);

  const SchedulerStats st = h.sched.stats();
  CHECK(st.num_running == 3);
  CHECK(st.num_waiting == 0);
  CHECK(st.num_preemptions == 0);
  CHECK(st.kv_cache_usage == Approx(7.0 / 63.0));
  CHECK(st.prefix_cache_queries == 0);  // prefix caching off in this harness
  CHECK(st.prefix_cache_hits == 0);
}

TEST_CASE("max_num_seqs caps the running set, a finished request makes room", "[scheduler]") {
  Harness h(config(8, 32, /*max_num_seqs=*/2), 64);
  h.add("A", tokens(100, 10));
  h.add("B", tokens(200, 3));
  h.add("C", tokens(300, 5));
  CHECK(h.step().plan == Plan{{"A", 8}});
  CHECK(h.step().plan == Plan{{"A", 2}, {"B", 3}});  // C waits: 2 running, budget left 3
  CHECK(h.step().plan == Plan{{"A", 1}, {"B", 1}});
  CHECK(h.sched.waiting_ids() == Names{"C"});
  CHECK(h.kv.num_free_blocks() == 59);  // A [1, 2, 3], B [4]

  std::unique_ptr<Request> a = h.sched.finish_request("A", RequestStatus::FinishedStopped);
  REQUIRE(a);
  CHECK(a->status == RequestStatus::FinishedStopped);
  CHECK(h.kv.num_free_blocks() == 62);  // freed at once, not at the next step
  CHECK(h.sched.get("A") == nullptr);
  // B (5 tokens) gets block 5; C's whole prompt (5 <= 7) gets 6, 7.
  Step s = h.step();
  CHECK(s.plan == Plan{{"B", 1}, {"C", 5}});
  CHECK(s.finished == Names{"A"});
  CHECK(h.blocks("B") == Ids{4, 5});
  CHECK(h.blocks("C") == Ids{6, 7});
  CHECK(h.step().finished.empty());
}

TEST_CASE("chunked prefill disabled: a prompt that does not fit stops admission",
          "[scheduler]") {
  SECTION("disabled") {
    Harness h(config(8, 8, 256, /*chunked=*/false), 64);
    h.add("A", tokens(100, 6));
    h.add("B", tokens(200, 3));
    h.add("C", tokens(300, 2));
    // B's 3 tokens exceed the 2 left, and FCFS does not let C (2) pass it.
    CHECK(h.step().plan == Plan{{"A", 6}});
    CHECK(h.step().plan == Plan{{"A", 1}, {"B", 3}, {"C", 2}});
  }
  SECTION("enabled, for contrast") {
    Harness h(config(8, 8, 256, /*chunked=*/true), 64);
    h.add("A", tokens(100, 6));
    h.add("B", tokens(200, 3));
    h.add("C", tokens(300, 2));
    CHECK(h.step().plan == Plan{{"A", 6}, {"B", 2}});
    CHECK(h.step().plan == Plan{{"A", 1}, {"B", 1}, {"C", 2}});
  }
  SECTION("a budget below max_model_len is rejected") {
    KVCacheManager kv(64, 4, false, 0, 8);
    CHECK_THROWS_AS(Scheduler(config(4, 8, 256, false), kv), std::invalid_argument);
  }
}

TEST_CASE("fcfs admits by arrival, priority by (priority, arrival)", "[scheduler]") {
  for (const char* policy : {"fcfs", "priority"}) {
    Harness h(config(4, 32, 256, true, policy), 64);
    h.add("X", tokens(100, 4), /*priority=*/5);
    h.add("Y", tokens(200, 4), 1);
    h.add("Z", tokens(300, 4), 1);
    CHECK(h.sched.get("X")->arrival_seq == 0);
    CHECK(h.sched.get("Z")->arrival_seq == 2);
    if (std::string(policy) == "fcfs") {
      CHECK(h.sched.waiting_ids() == Names{"X", "Y", "Z"});
      CHECK(h.step().plan == Plan{{"X", 4}});
      CHECK(h.step().plan == Plan{{"X", 1}, {"Y", 3}});
      CHECK(h.step().plan == Plan{{"X", 1}, {"Y", 1}, {"Z", 2}});
    } else {
      CHECK(h.sched.waiting_ids() == Names{"Y", "Z", "X"});
      CHECK(h.step().plan == Plan{{"Y", 4}});
      CHECK(h.step().plan == Plan{{"Y", 1}, {"Z", 3}});
      CHECK(h.step().plan == Plan{{"Y", 1}, {"Z", 1}, {"X", 2}});
    }
  }
}

TEST_CASE("fcfs preemption: the last running request is preempted and recomputed later",
          "[scheduler]") {
  // 4 usable blocks of 4 tokens; max_model_len 16 = 4 blocks; 2 running at most, so C (3
  // tokens) waits from the start.
  Harness h(config(16, 16, /*max_num_seqs=*/2), 5);
  h.add("A", tokens(100, 7));
  h.add("B", tokens(200, 5));
  h.add("C", tokens(300, 3));
  CHECK(h.step().plan == Plan{{"A", 7}, {"B", 5}});
  CHECK(h.blocks("A") == Ids{1, 2});
  CHECK(h.blocks("B") == Ids{3, 4});
  // Step 2: A 8 tokens, B 6 tokens: still 2 blocks each.
  CHECK(h.step().plan == Plan{{"A", 1}, {"B", 1}});
  // Step 3: A's 9th token needs a third block, none free: B (last) is preempted, its blocks
  // [3, 4] freed last-first (free list 4, 3), and A gets block 4.
  Step s3 = h.step();
  CHECK(s3.plan == Plan{{"A", 1}});
  CHECK(s3.preempted == Names{"B"});
  const Request* b = h.sched.get("B");
  CHECK(b->status == RequestStatus::Preempted);
  CHECK(b->num_computed_tokens == 0);
  CHECK(b->num_preemptions == 1);
  CHECK(b->num_tokens() == 7);  // 5 prompt + 2 outputs survive preemption
  CHECK(h.blocks("B").empty());
  CHECK(h.blocks("A") == Ids{1, 2, 4});
  CHECK(h.kv.block_pool().free_block_ids() == Ids{3});
  CHECK(h.sched.waiting_ids() == Names{"B", "C"});  // the preempted request goes first
  SchedulerStats st = h.sched.stats();
  CHECK(st.num_preemptions == 1);
  CHECK(st.num_running == 1);
  CHECK(st.num_waiting == 2);
  CHECK(st.kv_cache_usage == Approx(0.75));
  // Step 4: B must recompute 7 tokens (2 blocks); 1 is free: it waits, and so does C behind
  // it (FCFS: C's one block would fit, but it may not pass B).
  Step s4 = h.step();
  CHECK(s4.plan == Plan{{"A", 1}});
  CHECK(s4.preempted.empty());
  // A stops (length); its blocks [1, 2, 4] return as 4, 2, 1 behind 3.
  REQUIRE(h.sched.finish_request("A", RequestStatus::FinishedLength));
  CHECK(h.kv.block_pool().free_block_ids() == Ids{3, 4, 2, 1});
  // Step 5: B resumes and recomputes prompt + outputs: 7 tokens; then C's 3.
  Step s5 = h.step();
  CHECK(s5.plan == Plan{{"B", 7}, {"C", 3}});
  CHECK(s5.finished == Names{"A"});
  CHECK(h.blocks("B") == Ids{3, 4});
  CHECK(h.blocks("C") == Ids{2});
  CHECK(b->status == RequestStatus::Running);
  CHECK(b->num_computed_tokens == 7);
  CHECK(h.step().plan == Plan{{"B", 1}, {"C", 1}});
  CHECK(h.sched.stats().num_preemptions == 1);
}

TEST_CASE("priority preemption: the least urgent request is preempted, even if already planned",
          "[scheduler]") {
  for (const char* policy : {"priority", "fcfs"}) {
    Harness h(config(16, 16, 256, true, policy), 5);
    h.add("X", tokens(100, 6), /*priority=*/5);
    CHECK(h.step().plan == Plan{{"X", 6}});  // X [1, 2]
    h.add("Y", tokens(200, 8), /*priority=*/0);
    CHECK(h.step().plan == Plan{{"X", 1}, {"Y", 8}});  // Y [3, 4]
    CHECK(h.blocks("Y") == Ids{3, 4});
    // Step 3: X (8 tokens, 2 blocks) is planned first; Y's 9th token needs a block.
    Step s3 = h.step();
    if (std::string(policy) == "priority") {
      // Victim: max (priority, arrival) = X, already planned: its token is taken back,
      // its blocks [1, 2] are freed (free list 2, 1) and Y gets block 2.
      CHECK(s3.plan == Plan{{"Y", 1}});
      CHECK(s3.total == 1);
      CHECK(s3.preempted == Names{"X"});
      CHECK(h.blocks("Y") == Ids{3, 4, 2});
      CHECK(h.sched.get("X")->num_computed_tokens == 0);
      CHECK(h.sched.waiting_ids() == Names{"X"});
      // Step 4: X must recompute 6 + 2 = 8 tokens (2 blocks), 1 free; it may not preempt Y.
      CHECK(h.step().plan == Plan{{"Y", 1}});
      CHECK(h.sched.get("X")->status == RequestStatus::Preempted);
    } else {
      // FCFS: the last running request, Y itself, is the victim; X keeps its token.
      CHECK(s3.plan == Plan{{"X", 1}});
      CHECK(s3.preempted == Names{"Y"});
      CHECK(h.blocks("Y").empty());
      CHECK(h.kv.block_pool().free_block_ids() == Ids{4, 3});
    }
  }
}

TEST_CASE("preemption of an earlier request keeps the later ones planned", "[scheduler]") {
  for (const char* policy : {"priority", "fcfs"}) {
    Harness h(config(16, 16, 256, true, policy), 6);  // 5 usable blocks
    h.add("X", tokens(100, 6), /*priority=*/5);
    CHECK(h.step().plan == Plan{{"X", 6}});  // X [1, 2]
    h.add("Y", tokens(200, 8), /*priority=*/0);
    h.add("W", tokens(300, 3), /*priority=*/0);
    CHECK(h.step().plan == Plan{{"X", 1}, {"Y", 8}, {"W", 3}});  // Y [3, 4], W [5]
    CHECK(h.kv.num_free_blocks() == 0);
    // Step 3: X (8 tokens) fits its 2 blocks; Y's 9th token needs a block; W (4) fits.
    Step s3 = h.step();
    if (std::string(policy) == "priority") {
      // Victim X (priority 5) was planned before Y: undone, blocks 2, 1 freed, Y takes 2,
      // and W, after Y in the running list, is still planned.
      CHECK(s3.plan == Plan{{"Y", 1}, {"W", 1}});
      CHECK(s3.preempted == Names{"X"});
      CHECK(h.blocks("Y") == Ids{3, 4, 2});
      CHECK(h.sched.running_ids() == Names{"Y", "W"});
      CHECK(h.kv.block_pool().free_block_ids() == Ids{1});
    } else {
      // FCFS: the victim is the last running request, W; Y takes its block 5.
      CHECK(s3.plan == Plan{{"X", 1}, {"Y", 1}});
      CHECK(s3.preempted == Names{"W"});
      CHECK(h.blocks("Y") == Ids{3, 4, 5});
      CHECK(h.sched.waiting_ids() == Names{"W"});
    }
  }
}

TEST_CASE("priority: a more urgent waiting request preempts a running one", "[scheduler]") {
  for (const char* policy : {"priority", "fcfs"}) {
    Harness h(config(32, 16, 256, true, policy), 5);
    h.add("X", tokens(100, 13), /*priority=*/5);
    CHECK(h.step().plan == Plan{{"X", 13}});
    CHECK(h.blocks("X") == Ids{1, 2, 3, 4});  // the whole pool
    h.add("Y", tokens(200, 4), /*priority=*/0);
    h.add("Z", tokens(300, 4), /*priority=*/0);
    Step s2 = h.step();
    if (std::string(policy) == "priority") {
      // X was planned (1 token, no new block); Y needs 1 block: X is preempted, its blocks
      // return as 4, 3, 2, 1 and Y takes 4. Admission ends after a preempting request, so Z
      // (which would fit) waits a step, as does X behind it ((5, 0) sorts after (0, 2)).
      CHECK(s2.plan == Plan{{"Y", 4}});
      CHECK(s2.total == 4);
      CHECK(s2.preempted == Names{"X"});
      CHECK(h.blocks("Y") == Ids{4});
      CHECK(h.sched.waiting_ids() == Names{"Z", "X"});
      // Step 3: Y's 5th token takes block 3, Z takes 2; X (14 tokens = 4 blocks) waits.
      CHECK(h.step().plan == Plan{{"Y", 1}, {"Z", 4}});
      CHECK(h.blocks("Y") == Ids{4, 3});
      CHECK(h.blocks("Z") == Ids{2});
      CHECK(h.sched.waiting_ids() == Names{"X"});
      // Step 4: Z's 5th token takes the last block, 1; X still cannot preempt either.
      CHECK(h.step().plan == Plan{{"Y", 1}, {"Z", 1}});
      CHECK(h.blocks("Z") == Ids{2, 1});
    } else {
      CHECK(s2.plan == Plan{{"X", 1}});  // Y and Z wait for blocks
      CHECK(s2.preempted.empty());
      CHECK(h.sched.waiting_ids() == Names{"Y", "Z"});
    }
  }
}

TEST_CASE("prefix hits in the scheduler: shared prompt blocks are not recomputed",
          "[scheduler]") {
  Harness h(config(32, 32), 64, /*prefix_caching=*/true);
  std::vector<int32_t> pa = tokens(1, 10), pb = tokens(1, 8);
  pb.insert(pb.end(), {50, 51, 52, 53});
  h.add("A", pa);
  h.add("B", pb);
  // A caches its two full blocks while it is allocated; B, admitted after it in the same step,
  // hits them (their KV is written in this step's forward before attention reads it).
  Step s1 = h.step();
  CHECK(s1.plan == Plan{{"A", 10}, {"B", 4}});
  CHECK(h.blocks("A") == Ids{1, 2, 3});
  CHECK(h.blocks("B") == Ids{1, 2, 4});
  CHECK(h.sched.get("A")->num_cached_tokens == 0);
  CHECK(h.sched.get("B")->num_cached_tokens == 8);
  CHECK(h.sched.get("B")->num_computed_tokens == 12);
  const SchedulerStats st = h.sched.stats();
  CHECK(st.prefix_cache_queries == 22);  // 10 + 12
  CHECK(st.prefix_cache_hits == 8);
  CHECK(st.kv_cache_usage == Approx(4.0 / 63.0));
  // B's 3 full blocks are hashed, and its 13th token (an output) starts a fourth.
  CHECK(h.sched.get("B")->block_hashes.size() == 3);
}

TEST_CASE("aborting running and waiting requests frees their blocks at once", "[scheduler]") {
  Harness h(config(8, 32, /*max_num_seqs=*/2), 64);
  h.add("A", tokens(100, 10));
  h.add("B", tokens(200, 3));
  h.add("C", tokens(300, 5));
  h.step();
  h.step();  // A [1, 2, 3], B [4] running; C waiting
  CHECK(h.kv.num_free_blocks() == 59);

  std::unique_ptr<Request> c = h.sched.finish_request("C", RequestStatus::FinishedAborted);
  REQUIRE(c);
  CHECK(c->status == RequestStatus::FinishedAborted);
  CHECK(c->is_finished());
  CHECK(h.sched.num_waiting() == 0);
  std::unique_ptr<Request> a = h.sched.finish_request("A", RequestStatus::FinishedAborted);
  REQUIRE(a);
  CHECK(h.kv.num_free_blocks() == 62);
  CHECK(h.blocks("A").empty());
  CHECK(h.sched.running_ids() == Names{"B"});
  CHECK(h.sched.finish_request("A", RequestStatus::FinishedAborted) == nullptr);  // twice
  CHECK(h.sched.finish_request("nope", RequestStatus::FinishedAborted) == nullptr);

  Step s = h.step();
  CHECK(s.finished == Names{"C", "A"});
  CHECK(s.plan == Plan{{"B", 1}});
  CHECK(h.step().finished.empty());
  CHECK(h.sched.has_unfinished_requests());
  REQUIRE(h.sched.finish_request("B", RequestStatus::FinishedStopped));
  CHECK_FALSE(h.sched.has_unfinished_requests());
  CHECK(h.kv.num_free_blocks() == 63);
  CHECK(h.sched.schedule().empty());
}

TEST_CASE("add_request and the constructor reject what could never run", "[scheduler]") {
  Harness h(config(8, 16), 8);
  CHECK_THROWS_AS(h.add("empty", {}), std::invalid_argument);
  CHECK_THROWS_AS(h.add("long", tokens(1, 17)), std::invalid_argument);
  h.add("ok", tokens(1, 16));
  CHECK_THROWS_AS(h.add("ok", tokens(1, 3)), std::invalid_argument);
  CHECK(h.sched.num_waiting() == 1);

  // max_model_len 16 needs 4 blocks; a pool of 4 (3 usable) cannot hold one request.
  KVCacheManager small(4, 4, false, 0, 16);
  CHECK_THROWS_AS(Scheduler(config(8, 16), small), std::invalid_argument);
  KVCacheManager kv(64, 4, false, 0, 16);
  CHECK_THROWS_AS(Scheduler(config(8, 16, 256, true, "lifo"), kv), std::invalid_argument);
}
