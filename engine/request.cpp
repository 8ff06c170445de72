#include "engine/request.h"

#include <utility>

#include "kernels/common/check.h"

namespace octet {

const char* request_status_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::Waiting: return "waiting";
    case RequestStatus::Running: return "running";
    case RequestStatus::Preempted: return "preempted";
    case RequestStatus::FinishedStopped: return "finished_stopped";
    case RequestStatus::FinishedLength: return "finished_length";
    case RequestStatus::FinishedAborted: return "finished_aborted";
  }
  return "?";
}

const char* finish_reason(RequestStatus s) {
  switch (s) {
    case RequestStatus::FinishedStopped: return "stop";
    case RequestStatus::FinishedLength: return "length";
    case RequestStatus::FinishedAborted: return "abort";
    default: return nullptr;
  }
}

Request::Request(std::string id, std::vector<int32_t> prompt, SamplingParams params,
                 int64_t prio)
    : request_id(std::move(id)),
      prompt_token_ids(std::move(prompt)),
      sampling_params(std::move(params)),
      priority(prio) {}

int32_t Request::token(int64_t i) const {
  const int64_t np = num_prompt_tokens();
  OCTET_CHECK(i >= 0 && i < num_tokens(), "Request::token: index ", i, " out of [0, ",
              num_tokens(), ") for '", request_id, "'");
  return i < np ? prompt_token_ids[i] : output_token_ids[i - np];
}

int64_t TokenIdsView::size() const { return r_->num_tokens(); }
int32_t TokenIdsView::operator[](int64_t i) const { return r_->token(i); }

std::vector<int32_t> TokenIdsView::copy() const {
  std::vector<int32_t> all(r_->prompt_token_ids);
  all.insert(all.end(), r_->output_token_ids.begin(), r_->output_token_ids.end());
  return all;
}

}  // namespace octet
