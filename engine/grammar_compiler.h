#pragma once
// Engine-internal side of structured outputs on xgrammar 0.2.8 (engine/structured_output.h):
// the grammar compiler service (a TokenizerInfo built once from the model's vocabulary, a
// GrammarCompiler, a cache and worker threads, so the engine thread never waits on a compile)
// and one sequence's grammar state (a GrammarMatcher and its token bitmask).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "engine/structured_output.h"

namespace octet {

class Tokenizer;

/// xgrammar's Grammar for `p` (no tokenizer). Throws RequestError(InvalidRequest, p.field)
/// when it does not parse or convert.
xgrammar::Grammar build_grammar(const StructuredOutputParams& p);

/// xgrammar's TokenizerInfo of the model: token i's encoded string is octet's own decoding of
/// it (Tokenizer::token_bytes, vocab type RAW), so the grammar matches exactly the bytes the
/// detokenizer emits; special tokens read "" (never allowed), and so do ids of a padded
/// vocabulary past the tokenizer's; stop tokens = the model's EOS ids; vocab_size = the logits
/// width (the model's vocab_size).
xgrammar::TokenizerInfo make_tokenizer_info(const Tokenizer& tokenizer,
                                            const std::vector<int32_t>& eos_token_ids,
                                            int64_t vocab_size);

using CompiledGrammarPtr = std::shared_ptr<const xgrammar::CompiledGrammar>;

/// Compiles structured-output specs against the model's tokenizer on its own worker threads,
/// caching the results by structured_output_key() (at most kMaxCachedGrammars, oldest dropped).
/// Identical specs submitted while one compiles share its future. Thread-safe.
class GrammarCompilerService {
 public:
  static constexpr size_t kMaxCachedGrammars = 256;

  /// `tokenizer` must outlive the service. on_done: called on a worker thread after each
  /// compile finishes (success or failure), e.g. to wake the engine thread. The TokenizerInfo
  /// is built on first use, on a worker.
  GrammarCompilerService(const Tokenizer& tokenizer, std::vector<int32_t> eos_token_ids,
                         int64_t vocab_size, std::function<void()> on_done, int num_workers = 2);
  ~GrammarCompilerService();  // drops queued jobs (their futures throw), joins the workers

  /// The compiled grammar of `p` (active). The future throws RequestError(InvalidRequest,
  /// p.field) when the spec does not compile.
  std::shared_future<CompiledGrammarPtr> compile(const StructuredOutputParams& p);

  /// Compiles `p` on the calling thread, bypassing the cache (benchmarks): the compiled grammar
  /// and *ms, the wall time of the compile. Throws as the future of compile() does.
  CompiledGrammarPtr compile_now(const StructuredOutputParams& p, double* ms);

  /// Test hook: when set, each worker calls it with the params before compiling (a test blocks
  /// in it to hold a compile pending). Set it before submitting.
  void set_before_compile(std::function<void(const StructuredOutputParams&)> hook);

 private:
  struct Job {
    StructuredOutputParams params;
    std::promise<CompiledGrammarPtr> promise;
  };
  void work();
  CompiledGrammarPtr compile_one(const StructuredOutputParams& p);
  xgrammar::GrammarCompiler& compiler();

  const Tokenizer& tokenizer_;
  std::vector<int32_t> eos_token_ids_;
  int64_t vocab_size_;
  std::function<void()> on_done_;
  std::once_flag compiler_once_;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<Job> jobs_;
  std::unordered_map<std::string, std::shared_future<CompiledGrammarPtr>> cache_;
  std::deque<std::string> cache_order_;  // insertion order, for eviction
  std::function<void(const StructuredOutputParams&)> before_compile_;
  std::vector<std::thread> workers_;
};

/// One sequence's grammar state: the matcher (advanced by every output token) and its bitmask
/// scratch: [ceil(vocab_size / 32)] int32, bit (i % 32) of word i / 32 set = token i allowed.
class GrammarState {
 public:
  explicit GrammarState(const CompiledGrammarPtr& grammar);
  /// The allowed tokens for the next position; valid until the next call.
  const int32_t* fill_bitmask();
  /// Advances past `token`; false when the grammar rejects it (then the state is unchanged).
  bool accept(int32_t token) { return matcher_.AcceptToken(token); }
  /// True once the matcher accepted a stop token (the grammar ended with EOS).
  bool terminated() const { return matcher_.IsTerminated(); }

 private:
  CompiledGrammarPtr grammar_;  // keeps the compiled grammar alive for the matcher
  xgrammar::GrammarMatcher matcher_;
  std::vector<int32_t> bitmask_;
};

}  // namespace octet
