#include "server/openai/request_checks.h"

#include <algorithm>
#include <cstdint>
#include <limits>
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

namespace {

int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

}  // namespace

int64_t logprob_entries(const GenerateRequest& r, const std::vector<int64_t>& prompt_lens,
                        const std::vector<int64_t>& max_tokens) {
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  const bool sampled = chat ? r.chat_logprobs : r.logprobs >= 0;
  const int64_t per_sampled = sampled ? std::max<int64_t>(r.logprobs, 0) + 1 : 0;
  const int64_t per_echoed = !chat && r.echo && r.logprobs >= 0 ? r.logprobs + 1 : 0;
  const int64_t per_prompt = r.prompt_logprobs >= 0 ? r.prompt_logprobs + 1 : 0;
  int64_t per_choice_total = 0;
  for (size_t p = 0; p < prompt_lens.size(); ++p) {
    const int64_t len = std::max<int64_t>(prompt_lens[p], 0);
    const int64_t gen = p < max_tokens.size() ? std::max<int64_t>(max_tokens[p], 0) : 0;
    per_choice_total = sat_add(per_choice_total, sat_mul(len, per_echoed + per_prompt));
    per_choice_total = sat_add(per_choice_total, sat_mul(gen, per_sampled));
  }
  return sat_mul(per_choice_total, std::max<int64_t>(r.n, 1));
}

int64_t logprob_entry_limit(int64_t max_logprobs) {
  return std::max(kMaxLogprobEntries, sat_mul(64, sat_add(std::max<int64_t>(max_logprobs, 0), 1)));
}

void check_logprob_budget(const GenerateRequest& r, const std::vector<int64_t>& prompt_lens,
                          const std::vector<int64_t>& max_tokens, int64_t limit) {
  const int64_t entries = logprob_entries(r, prompt_lens, max_tokens);
  if (entries <= limit) return;
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  const char* field = chat ? (!r.chat_logprobs ? "prompt_logprobs"
                              : r.logprobs > 0 ? "top_logprobs"
                                               : "logprobs")
                           : (r.logprobs >= 0 ? "logprobs" : "prompt_logprobs");
  throw bad_request("the response would carry " + std::to_string(entries) +
                        " logprob entries (n x tokens x (top logprobs + 1)), more than the limit "
                        "of " + std::to_string(limit) +
                        "; lower n, max_tokens, the number of top logprobs, or the prompt " +
                        "(echo, prompt_logprobs)",
                    field);
}

}  // namespace octet::server
