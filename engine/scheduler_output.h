#pragma once
// What one engine step runs (vLLM v1 vllm/v1/core/sched/output.py, simplified for an
// in-process engine: requests are passed by pointer, new and running ones alike). The model
// runner reads each request's tokens [num_computed_tokens, num_computed_tokens + n) and its
// block table from the KVCacheManager.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"

namespace octet {

struct SchedulerOutput {
  // Requests to run, in running order: previously running ones first, then those admitted
  // this step (new or resumed after preemption). Owned by the Scheduler; valid until the
  // request is finished.
  std::vector<Request*> scheduled;
  std::vector<int64_t> num_scheduled_tokens;  // [scheduled.size()], each >= 1
  int64_t total_num_scheduled_tokens = 0;     // sum of num_scheduled_tokens
  std::vector<std::string> preempted_ids;     // preempted this step (blocks already freed)
  std::vector<std::string> finished_ids;      // finished or aborted since the last schedule()

  bool empty() const { return scheduled.empty(); }
};

}  // namespace octet
