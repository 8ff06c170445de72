#include "engine/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "kernels/common/check.h"

namespace octet {

namespace {

// Removes r from this step's plan, if planned, giving its tokens back to the budget.
void unschedule(SchedulerOutput& out, const Request* r, int64_t& budget) {
  for (size_t k = 0; k < out.scheduled.size(); ++k) {
    if (out.scheduled[k] != r) continue;
    budget += out.num_scheduled_tokens[k];
    out.total_num_scheduled_tokens -= out.num_scheduled_tokens[k];
    out.scheduled.erase(out.scheduled.begin() + k);
    out.num_scheduled_tokens.erase(out.num_scheduled_tokens.begin() + k);
    return;
  }
}

void plan(SchedulerOutput& out, Request* r, int64_t n, int64_t& budget) {
  out.scheduled.push_back(r);
  out.num_scheduled_tokens.push_back(n);
  out.total_num_scheduled_tokens += n;
  budget -= n;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager& kv)
    : config_(config), kv_(kv) {
  config_.validate();
  priority_policy_ = config_.scheduling_policy == "priority";
  // One request of max_model_len tokens, chunked as this scheduler chunks, must fit alone.
  const int64_t chunk = config_.enable_chunked_prefill ? config_.max_num_batched_tokens
                                                       : kv_.max_model_len();
  if (const int64_t need = kv_.blocks_held(kv_.max_model_len(), chunk); need > kv_.num_blocks() - 1)
    throw std::invalid_argument(
        "max_model_len " + std::to_string(kv_.max_model_len()) + " needs " +
        std::to_string(need) + " KV blocks of " +
        std::to_string(kv_.block_size()) + " tokens, but the KV cache has only " +
        std::to_string(kv_.num_blocks() - 1) +
        ": lower --max-model-len or raise the KV cache budget");
  if (!config_.enable_chunked_prefill && config_.max_num_batched_tokens < kv_.max_model_len())
    throw std::invalid_argument(
        "--max-num-batched-tokens (" + std::to_string(config_.max_num_batched_tokens) +
        ") is smaller than max_model_len (" + std::to_string(kv_.max_model_len()) +
        ") with chunked prefill disabled: long prompts could never be scheduled");
}

bool Scheduler::precedes(const Request* a, const Request* b) const {
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->arrival_seq < b->arrival_seq;
}

void Scheduler::enqueue_waiting(Request* r, bool front) {
  if (priority_policy_) {
    const auto pos = std::upper_bound(
        waiting_.begin(), waiting_.end(), r,
        [this](const Request* a, const Request* b) { return precedes(a, b); });
    waiting_.insert(pos, r);
  } else if (front) {
    waiting_.push_front(r);
  } else {
    waiting_.push_back(r);
  }
}

void Scheduler::add_request(std::unique_ptr<Request> request) {
  if (!request) throw std::invalid_argument("add_request: null request");
  if (request->prompt_token_ids.empty())
    throw std::invalid_argument("request '" + request->request_id + "': the prompt is empty");
  if (request->num_tokens() > kv_.max_model_len())
    throw std::invalid_argument("request '" + request->request_id + "': " +
                                std::to_string(request->num_tokens()) +
                                " tokens exceed max_model_len " +
                                std::to_string(kv_.max_model_len()));
  if (requests_.count(request->request_id))
    throw std::invalid_argument("request id '" + request->request_id + "' is already in use");
  Request* r = request.get();
  r->status = RequestStatus::Waiting;
  r->arrival_seq = next_arrival_seq_++;
  kv_.update_block_hashes(*r);
  requests_.emplace(r->request_id, std::move(request));
  enqueue_waiting(r, /*front=*/false);
}

size_t Scheduler::pick_victim() const {
  if (!priority_policy_) return running_.size() - 1;
  size_t v = 0;
  for (size_t k = 1; k < running_.size(); ++k)
    if (precedes(running_[v], running_[k])) v = k;
  return v;
}

void Scheduler::preempt(Request* r, SchedulerOutput& out, int64_t& budget) {
  unschedule(out, r, budget);
  kv_.free(*r);
  r->num_computed_tokens = 0;
  r->status = RequestStatus::Preempted;
  ++r->num_preemptions;
  ++num_preemptions_;
  out.preempted_ids.push_back(r->request_id);
  enqueue_waiting(r, /*front=*/true);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.finished_ids = std::move(finished_ids_);
  finished_ids_.clear();
  int64_t budget = config_.max_num_batched_tokens;

  // Running requests, in order.
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request* r = running_[i];
    const int64_t n = std::min(r->num_tokens() - r->num_computed_tokens, budget);
    if (n <= 0) {  // nothing to compute (the engine appended no token): skip this step
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!kv_.allocate_slots(*r, n)) {
      const size_t v = pick_victim();
      Request* victim = running_[v];
      running_.erase(running_.begin() + v);
      preempt(victim, out, budget);  // gives back its tokens if planned earlier this step
      if (victim == r) {
        self_preempted = true;
        break;
      }
      if (v < i) --i;
    }
    if (self_preempted) break;
    plan(out, r, n, budget);
    ++i;
  }

  // Waiting requests, unless blocks ran short above.
  if (!out.preempted_ids.empty()) return out;
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    const ComputedBlocks hit = kv_.get_computed_blocks(*r);
    int64_t n = r->num_tokens() - hit.num_computed_tokens;
    if (!config_.enable_chunked_prefill && n > budget) break;
    n = std::min(n, budget);
    bool preempted_for_r = false;
    bool admitted = true;
    while (!kv_.allocate_slots(*r, n, hit)) {
      // Policy priority: a more urgent waiting request takes blocks from less urgent running
      // ones. r stays at the queue head: each victim sorts after it.
      if (!priority_policy_ || running_.empty()) {
        admitted = false;
        break;
      }
      const size_t v = pick_victim();
      if (!precedes(r, running_[v])) {
        admitted = false;
        break;
      }
      Request* victim = running_[v];
      running_.erase(running_.begin() + v);
      preempt(victim, out, budget);
      preempted_for_r = true;
    }
    if (!admitted) break;
    waiting_.pop_front();
    r->num_computed_tokens = hit.num_computed_tokens;
    if (r->num_cached_tokens < 0) r->num_cached_tokens = hit.num_computed_tokens;
    r->status = RequestStatus::Running;
    running_.push_back(r);
    plan(out, r, n, budget);
    if (preempted_for_r) break;
  }
  return out;
}

void Scheduler::update(const SchedulerOutput& out) {
  for (size_t k = 0; k < out.scheduled.size(); ++k) {
    Request* r = out.scheduled[k];
    r->num_computed_tokens += out.num_scheduled_tokens[k];
    OCTET_CHECK(r->num_computed_tokens <= r->num_tokens(), "Scheduler: update: '", r->request_id,
                "' computed ", r->num_computed_tokens, " of ", r->num_tokens(), " tokens");
    kv_.update_block_hashes(*r);
  }
}

std::unique_ptr<Request> Scheduler::finish_request(const std::string& request_id,
                                                   RequestStatus status) {
  OCTET_CHECK(status == RequestStatus::FinishedStopped || status == RequestStatus::FinishedLength ||
                  status == RequestStatus::FinishedAborted,
              "Scheduler: finish_request: status ", request_status_name(status),
              " is not a finished status");
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return nullptr;
  std::unique_ptr<Request> req = std::move(it->second);
  requests_.erase(it);
  Request* r = req.get();
  if (const auto rit = std::find(running_.begin(), running_.end(), r); rit != running_.end())
    running_.erase(rit);
  if (const auto wit = std::find(waiting_.begin(), waiting_.end(), r); wit != waiting_.end())
    waiting_.erase(wit);
  kv_.free(*r);
  r->status = status;
  finished_ids_.push_back(request_id);
  return req;
}

Request* Scheduler::get(const std::string& request_id) {
  const auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  s.num_preemptions = num_preemptions_;
  s.kv_cache_usage = kv_.usage();
  s.prefix_cache_queries = kv_.prefix_cache_queries();
  s.prefix_cache_hits = kv_.prefix_cache_hits();
  return s;
}

std::vector<std::string> Scheduler::running_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : running_) ids.push_back(r->request_id);
  return ids;
}

std::vector<std::string> Scheduler::waiting_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : waiting_) ids.push_back(r->request_id);
  return ids;
}

}  // namespace octet
