#pragma once
// Test helper: greedy decoding with LlamaModel over a one-sequence cache (one prefill, then one
// token per step), argmax with the lowest id on ties.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/llama.h"

namespace octet::testing {

inline std::vector<int32_t> greedy(const LlamaModel& model, const std::vector<int32_t>& prompt,
                                   int64_t n_new) {
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  auto cache = model.new_cache(n_prompt + n_new);
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> logits = model.forward(prompt.data(), n_prompt, 0, cache, false);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n_new; ++i) {
    out.push_back(static_cast<int32_t>(
        std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin()));
    if (i + 1 < n_new) logits = model.forward(&out.back(), 1, n_prompt + i, cache, false);
  }
  return out;
}

}  // namespace octet::testing
