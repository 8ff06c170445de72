#pragma once
// Workloads of `octet bench serve` (vLLM's dataset names): random prompts of exact token
// lengths, ShareGPT conversations, or one prompt per line of a JSONL file.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/load_client.h"

namespace octet {
class Tokenizer;
}

namespace octet::bench {

/// The tokenizer of a GGUF file or a Hugging Face directory (tokenizer.json). Throws
/// std::invalid_argument naming the path when it does not exist; the loaders' errors otherwise.
std::unique_ptr<Tokenizer> load_bench_tokenizer(const std::string& path);

/// Tokens of `text` as the server counts a completion (no BOS/EOS added).
int64_t count_tokens(const Tokenizer& tok, const std::string& text);

struct RandomDatasetOptions {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0;   // lengths uniform in [floor(L(1-r)), ceil(L(1+r))], r in [0, 1)
  int64_t prefix_len = 0;   // random tokens shared by every prompt, before its own
  uint64_t seed = 0;
};

/// Random prompts: random non-special token ids decoded to text and re-tokenized, adjusted until
/// the text encodes to exactly prefix_len + the request's input length (vLLM's random dataset).
/// prompt_len is the encoded length of the final text (the exact length except in the rare case
/// that no text of that length was found in 32 tries).
std::vector<RequestSpec> random_dataset(const Tokenizer& tok, const RandomDatasetOptions& o);

/// ShareGPT JSON (a list of {"conversations": [{"from": "human", "value": ...},
/// {"from": "gpt", "value": ...}, ...]}): the first turn is the prompt, the second's token count
/// the output length (output_len > 0 overrides it). As vLLM, conversations with fewer than two
/// turns are skipped, and so are pairs with a prompt or completion under 4 tokens, a prompt over
/// 1024 tokens or prompt + completion over 2048. Shuffled with `seed`, the first num_prompts
/// kept. Throws std::invalid_argument naming --dataset-path for a file that cannot be read within
/// kMaxDatasetFileBytes (config/file_read.h), malformed JSON or JSON nested deeper than
/// kMaxJsonDepth, or when fewer than num_prompts remain.
std::vector<RequestSpec> sharegpt_dataset(const std::string& path, const Tokenizer& tok,
                                          int64_t num_prompts, int64_t output_len, uint64_t seed);

/// JSONL: one prompt per line, either {"prompt": "...", "output_tokens": N (optional)} or a JSON
/// string; empty lines skipped; output length output_tokens else `output_len`. The first
/// num_prompts lines are used, cycled when the file has fewer. Throws std::invalid_argument naming
/// --dataset-path for a file that cannot be read within kMaxDatasetFileBytes, a line that is
/// neither form, an output_tokens outside [1, 2^24], a file without prompts, or cycled prompts
/// holding more than kMaxDatasetFileBytes in all.
std::vector<RequestSpec> jsonl_dataset(const std::string& path, const Tokenizer& tok,
                                       int64_t num_prompts, int64_t output_len);

/// Arrival times, seconds from the start: all 0 for an infinite rate, else gaps drawn from a
/// gamma distribution of shape `burstiness` and mean 1/rate (burstiness 1 = Poisson), summed and
/// rescaled so that the last arrival is at n/rate (vLLM's get_request); all 0 when the gaps
/// degenerate (a burstiness so small that every gap rounds to 0). Throws std::invalid_argument
/// for a rate that is not positive or a burstiness that is not positive and finite.
std::vector<double> arrival_times(size_t n, double request_rate, double burstiness, uint64_t seed);

}  // namespace octet::bench
