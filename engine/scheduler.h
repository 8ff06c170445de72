#pragma once
// Continuous batching by token budget (vLLM v1 vllm/v1/core/sched/scheduler.py; nano-vllm
// engine/scheduler.py for the shape): no prefill or decode phase, each request advances its
// num_computed_tokens toward num_tokens by as many tokens as the step's budget allows (chunked
// prefill, prefix hits and decode fall out of that). When KV blocks run out the lowest-priority
// running request is preempted: its blocks are freed at once and it is later recomputed.
//
// One engine step: out = schedule(); run the model on out; append each sampled token
// (Request::append_output_token) to the requests whose scheduled tokens reached their end;
// update(out); then finish_request() the ones that stopped. Not thread-safe: the engine thread
// alone calls it (aborts from other threads are applied between steps).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/engine_config.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"

namespace octet {

struct SchedulerStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;          // preempted requests included
  int64_t num_preemptions = 0;      // total since start
  double kv_cache_usage = 0.0;      // fraction of usable KV blocks in use, 0..1
  int64_t prefix_cache_queries = 0; // tokens (KVCacheManager::prefix_cache_queries)
  int64_t prefix_cache_hits = 0;    // tokens
};

class Scheduler {
 public:
  /// config.validate() is called (std::invalid_argument). Also throws std::invalid_argument
  /// when one request of kv.max_model_len() tokens would not fit in the pool (it could never
  /// run) or, with chunked prefill disabled, in one step's budget.
  Scheduler(const SchedulerConfig& config, KVCacheManager& kv);

  /// Queues a request (status Waiting, arrival_seq set). Throws std::invalid_argument for an
  /// empty prompt, a prompt longer than max_model_len or an id already in use. Hashes its
  /// prompt blocks for the prefix cache. The engine must finish a request (length) once its
  /// num_tokens() reaches max_model_len: scheduling past it can fail a CHECK in
  /// allocate_slots.
  void add_request(std::unique_ptr<Request> request);

  /// Plans one step within max_num_batched_tokens tokens and max_num_seqs requests: first the
  /// running requests in order, each min(num_tokens - num_computed_tokens, budget left) tokens,
  /// preempting the lowest-priority running request when blocks run out (fcfs: the last one;
  /// priority: the largest (priority, arrival_seq)) and stopping when the victim is the
  /// request itself; then, if nothing was preempted, waiting requests in queue order (fcfs:
  /// arrival, preempted ones first; priority: (priority, arrival_seq)) with their prefix hits,
  /// until the budget, max_num_seqs or the free blocks run out. With chunked prefill disabled a
  /// waiting request whose remaining tokens exceed the budget left stops admission. With policy
  /// priority a waiting request that does not fit preempts running requests of larger
  /// (priority, arrival_seq), undoing their share of this step; admission ends after it.
  SchedulerOutput schedule();

  /// After the step ran and the engine appended the sampled tokens: advances each scheduled
  /// request's num_computed_tokens by its scheduled count and extends its block hashes (the
  /// full blocks were already offered to the prefix cache by allocate_slots, since their KV is
  /// written during the step). Call before finishing any request of `out`.
  void update(const SchedulerOutput& out);

  /// Finishes a running or waiting request with a Finished* status (stop, length, abort):
  /// frees its blocks at once, reports its id in the next schedule()'s finished_ids and hands
  /// the request back (nullptr for an unknown id, e.g. an abort racing a finish). A status
  /// that is not Finished* is a CHECK.
  std::unique_ptr<Request> finish_request(const std::string& request_id, RequestStatus status);

  /// The live (waiting or running) request, or nullptr.
  Request* get(const std::string& request_id);

  SchedulerStats stats() const;
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool has_unfinished_requests() const { return !requests_.empty(); }
  /// Ids in running order / waiting-queue order (tests, debugging).
  std::vector<std::string> running_ids() const;
  std::vector<std::string> waiting_ids() const;

 private:
  bool precedes(const Request* a, const Request* b) const;  // a runs before b (priority)
  void enqueue_waiting(Request* r, bool front);
  void preempt(Request* r, SchedulerOutput& out, int64_t& budget);
  size_t pick_victim() const;  // index into running_

  SchedulerConfig config_;
  KVCacheManager& kv_;
  bool priority_policy_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;  // live requests
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;  // admission order
  std::vector<std::string> finished_ids_;
  uint64_t next_arrival_seq_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace octet
