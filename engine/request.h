#pragma once
// One generation request as the scheduler sees it (vLLM v1 vllm/v1/request.py, nano-vllm
// engine/sequence.py): its tokens, how many of them have KV in the cache, its block hashes and
// its state. Pure host data; the scheduler owns it, the engine reads and appends tokens.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace octet {

/// Waiting: queued, no KV blocks. Running: holds blocks, scheduled every step. Preempted: back in
/// the waiting queue, blocks freed, will be recomputed from token 0. Finished*: done (stop
/// token or string, max_tokens / max_model_len, aborted by the client or the engine).
enum class RequestStatus : uint8_t {
  Waiting,
  Running,
  Preempted,
  FinishedStopped,
  FinishedLength,
  FinishedAborted,
};

/// "waiting", "running", "preempted", "finished_stopped", "finished_length", "finished_aborted".
const char* request_status_name(RequestStatus s);
/// OpenAI finish_reason of a finished status: "stop", "length", "abort"; nullptr otherwise.
const char* finish_reason(RequestStatus s);

struct Request;

/// Read-only view of a request's prompt followed by its output tokens (no copy).
class TokenIdsView {
 public:
  explicit TokenIdsView(const Request& r) : r_(&r) {}
  int64_t size() const;
  int32_t operator[](int64_t i) const;
  /// The tokens as one vector (a copy, O(size)).
  std::vector<int32_t> copy() const;

 private:
  const Request* r_;
};

struct Request {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  SamplingParams sampling_params;
  int64_t priority = 0;      // policy "priority": lower runs first
  uint64_t arrival_seq = 0;  // set by Scheduler::add_request; FCFS order and tie-break
  RequestStatus status = RequestStatus::Waiting;
  // Tokens (prompt then output) whose KV is in the cache at the start of the next step; reset to
  // 0 on preemption.
  int64_t num_computed_tokens = 0;
  // Prompt tokens served from the prefix cache when first scheduled; -1 before that.
  int64_t num_cached_tokens = -1;
  // Chained hash of each full block of all tokens: block_hashes[i] covers tokens
  // [i * block_size, (i + 1) * block_size). Extended by KVCacheManager::update_block_hashes.
  std::vector<uint64_t> block_hashes;
  int64_t num_preemptions = 0;

  Request() = default;
  Request(std::string id, std::vector<int32_t> prompt, SamplingParams params = {},
          int64_t priority = 0);

  /// Prompt + output tokens.
  int64_t num_tokens() const {
    return static_cast<int64_t>(prompt_token_ids.size() + output_token_ids.size());
  }
  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_token_ids.size()); }
  /// Token i of prompt + output, 0 <= i < num_tokens() (CHECKed).
  int32_t token(int64_t i) const;
  TokenIdsView all_token_ids() const { return TokenIdsView(*this); }
  void append_output_token(int32_t id) { output_token_ids.push_back(id); }
  bool is_finished() const { return status >= RequestStatus::FinishedStopped; }
};

}  // namespace octet
