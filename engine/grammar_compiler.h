#pragma once
// Engine-internal side of structured outputs on xgrammar 0.2.8 (engine/structured_output.h):
// the grammar compiler service (a TokenizerInfo built once from the model's vocabulary, a
// GrammarCompiler, a cache and worker threads, so the engine thread never waits on a compile)
// and one sequence's grammar state (a GrammarMatcher and its token bitmask).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "engine/request_error.h"
#include "engine/structured_output.h"

namespace octet {

class Tokenizer;

/// xgrammar's Grammar for `p`. tokenizer_info: resolves a structural tag's token-level formats
/// (nullptr: validation without a tokenizer, where they do not convert). Throws
/// RequestError(InvalidRequest, p.field) when it does not parse or convert.
xgrammar::Grammar build_grammar(const StructuredOutputParams& p,
                                const xgrammar::TokenizerInfo* tokenizer_info = nullptr);

/// xgrammar's TokenizerInfo of the model: token i's encoded string is octet's own decoding of
/// it (Tokenizer::token_bytes, vocab type RAW), so the grammar matches exactly the bytes the
/// detokenizer emits; special tokens read "" (never allowed), and so do ids of a padded
/// vocabulary past the tokenizer's; stop tokens = the model's EOS ids; vocab_size = the logits
/// width (the model's vocab_size).
xgrammar::TokenizerInfo make_tokenizer_info(const Tokenizer& tokenizer,
                                            const std::vector<int32_t>& eos_token_ids,
                                            int64_t vocab_size);

using CompiledGrammarPtr = std::shared_ptr<const xgrammar::CompiledGrammar>;

/// Bytes of compiled grammars the service keeps cached by default: a JSON schema's grammar takes
/// ~0.1-1 MB, a pathological one (huge enums) 40-90 MB; least recently used entries go first.
inline constexpr int64_t kDefaultGrammarCacheBytes = int64_t{512} << 20;

/// How long a request may wait for its grammar by default (queued behind other compiles, then
/// compiling) before it fails with a 400 naming its field. The compile itself is not stopped
/// (xgrammar cannot cancel one): it finishes on its worker and is cached for later requests.
inline constexpr std::chrono::milliseconds kDefaultGrammarCompileTimeout{60000};

/// The RequestError (InvalidRequest, p.field) of a request that waited longer than `timeout`
/// for its grammar: "compiling the grammar of '<field>' took longer than <N> s; ...".
RequestError grammar_timeout_error(const StructuredOutputParams& p,
                                   std::chrono::milliseconds timeout);

/// Compiles structured-output specs against the model's tokenizer on its own worker threads,
/// caching the results by structured_output_key(): at most cache_bytes in all (each entry
/// counted as its CompiledGrammar::MemorySizeBytes() plus its key; failed compiles are cached by
/// key, so a bad spec is not recompiled), least recently used evicted first; an entry larger
/// than cache_bytes is handed to its requesters but not kept. Identical specs submitted while
/// one compiles share its future. A queued job whose requesters all stopped waiting (each waits
/// at most compile_timeout() from its compile() call) is dropped unstarted. Thread-safe.
class GrammarCompilerService {
 public:
  /// `tokenizer` must outlive the service. on_done: called on a worker thread after each
  /// compile finishes (success or failure), e.g. to wake the engine thread. The TokenizerInfo
  /// is built on first use, on a worker.
  GrammarCompilerService(const Tokenizer& tokenizer, std::vector<int32_t> eos_token_ids,
                         int64_t vocab_size, std::function<void()> on_done, int num_workers = 2,
                         int64_t cache_bytes = kDefaultGrammarCacheBytes);
  ~GrammarCompilerService();  // drops queued jobs (their futures throw), joins the workers

  /// The compiled grammar of `p` (active). The future throws RequestError(InvalidRequest,
  /// p.field) when the spec does not compile.
  std::shared_future<CompiledGrammarPtr> compile(const StructuredOutputParams& p);

  /// Compiles `p` on the calling thread, bypassing the cache (benchmarks): the compiled grammar
  /// and *ms, the wall time of the compile. Throws as the future of compile() does.
  CompiledGrammarPtr compile_now(const StructuredOutputParams& p, double* ms);

  /// How long a requester waits for a compile (kDefaultGrammarCompileTimeout unless set; tests
  /// set a small one). The engine fails a request waiting longer; the service uses it to drop
  /// abandoned queued jobs.
  std::chrono::milliseconds compile_timeout() const;
  void set_compile_timeout(std::chrono::milliseconds timeout);

  /// The cache's finished entries and their bytes (compiles in flight are not counted).
  struct CacheStats {
    int64_t num_entries = 0;
    int64_t bytes = 0;
  };
  CacheStats cache_stats() const;

  /// Test hook: when set, each worker calls it with the params before compiling (a test blocks
  /// in it to hold a compile pending). Set it before submitting.
  void set_before_compile(std::function<void(const StructuredOutputParams&)> hook);

 private:
  using Clock = std::chrono::steady_clock;
  struct Job {
    std::string key;
    uint64_t id = 0;
    StructuredOutputParams params;
    std::promise<CompiledGrammarPtr> promise;
  };
  struct Entry {
    std::shared_future<CompiledGrammarPtr> future;
    uint64_t job_id = 0;
    bool done = false;
    int64_t bytes = 0;                  // key + compiled grammar, once done
    Clock::time_point wanted_until;     // while queued: the last requester's deadline
    std::list<std::string>::iterator lru;  // position in lru_
  };
  void work();
  void finish_job(const Job& job, const CompiledGrammarPtr& grammar);  // under mu_
  void erase_entry(std::unordered_map<std::string, Entry>::iterator it);  // under mu_
  CompiledGrammarPtr compile_one(const StructuredOutputParams& p);
  xgrammar::GrammarCompiler& compiler();

  const Tokenizer& tokenizer_;
  std::vector<int32_t> eos_token_ids_;
  int64_t vocab_size_;
  std::function<void()> on_done_;
  const int64_t cache_bytes_;
  std::once_flag compiler_once_;
  std::unique_ptr<xgrammar::TokenizerInfo> tokenizer_info_;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<Job> jobs_;
  uint64_t next_job_id_ = 1;
  std::chrono::milliseconds compile_timeout_ = kDefaultGrammarCompileTimeout;
  std::unordered_map<std::string, Entry> cache_;
  std::list<std::string> lru_;  // keys, most recently used first
  int64_t cached_bytes_ = 0;    // sum of the done entries' bytes
  std::function<void(const StructuredOutputParams&)> before_compile_;
  std::vector<std::thread> workers_;
};

/// One sequence's grammar state: the matcher (advanced by every output token) and its bitmask
/// scratch: [ceil(vocab_size / 32)] int32, bit (i % 32) of word i / 32 set = token i allowed.
class GrammarState {
 public:
  explicit GrammarState(const CompiledGrammarPtr& grammar);
  /// Fills bitmask() with the tokens allowed at the next position. Never throws: an xgrammar
  /// error is kept in fill_error() (so fills can run on a thread team). Thread-safe across
  /// different GrammarStates.
  void fill_bitmask() noexcept;
  const int32_t* bitmask() const { return bitmask_.data(); }
  const std::string& fill_error() const { return fill_error_; }
  /// Advances past `token`; false when the grammar rejects it (then the state is unchanged).
  bool accept(int32_t token) { return matcher_.AcceptToken(token); }
  /// True once the matcher accepted a stop token (the grammar ended with EOS).
  bool terminated() const { return matcher_.IsTerminated(); }

 private:
  CompiledGrammarPtr grammar_;  // keeps the compiled grammar alive for the matcher
  xgrammar::GrammarMatcher matcher_;
  std::vector<int32_t> bitmask_;
  std::string fill_error_;
};

}  // namespace octet
