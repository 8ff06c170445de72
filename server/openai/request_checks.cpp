#include "server/openai/request_checks.h"

#include <algorithm>
#include <string>
#include <vector>

#include "server/openai/api_error.h"

namespace octet::server {

void resolve_logprobs(GenerateRequest& r, int64_t vocab_size, int64_t max_logprobs) {
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  const int64_t max_allowed = max_logprobs < 0 ? vocab_size : max_logprobs;  // -1: no cap
  const auto resolve = [&](int64_t& k, const char* what, const char* field) {
    if (k == kLogprobsWholeVocab) k = vocab_size;
    if (k > max_allowed)
      throw bad_request(std::string("Requested ") + what + " logprobs of " + std::to_string(k) +
                            ", which is greater than max allowed: " +
                            std::to_string(max_allowed) + " (--max-logprobs)",
                        field);
  };
  resolve(r.logprobs, "sample", chat ? "top_logprobs" : "logprobs");
  resolve(r.prompt_logprobs, "prompt", "prompt_logprobs");
  r.params.logprobs = r.logprobs;
  r.params.prompt_logprobs = r.prompt_logprobs;
  if (!chat && r.echo && r.logprobs >= 0)
    r.params.prompt_logprobs = std::max(r.params.prompt_logprobs, r.logprobs);
}

void check_logit_bias_vocab(const SamplingParams& params, int64_t vocab_size) {
  std::vector<int32_t> bad;
  for (const auto& [id, bias] : params.logit_bias)
    if (id < 0 || id >= vocab_size) bad.push_back(id);
  if (bad.empty()) return;
  std::sort(bad.begin(), bad.end());
  std::string list;
  for (size_t i = 0; i < bad.size() && i < 16; ++i)
    list += (i ? ", " : "") + std::to_string(bad[i]);
  if (bad.size() > 16) list += ", ... " + std::to_string(bad.size() - 16) + " more";
  throw bad_request("token_id(s) [" + list + "] in logit_bias contain out-of-vocab token ids. "
                        "Vocabulary size: " + std::to_string(vocab_size),
                    "logit_bias");
}

}  // namespace octet::server
