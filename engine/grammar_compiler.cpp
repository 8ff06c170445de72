// Grammar compiler service and per-sequence grammar state on xgrammar (grammar_compiler.h).
#include "engine/grammar_compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iterator>
#include <utility>

#include "engine/request_error.h"
#include "engine/xgrammar_log.h"
#include "models/tokenizer.h"

namespace octet {

xgrammar::TokenizerInfo make_tokenizer_info(const Tokenizer& tokenizer,
                                            const std::vector<int32_t>& eos_token_ids,
                                            int64_t vocab_size) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> vocab(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    bool eos = false;
    for (int32_t e : eos_token_ids) eos = eos || e == i;
    // A stop token keeps its text (xgrammar keys stop tokens by id); other special tokens read
    // "" so that no grammar can emit them.
    if (eos || !tokenizer.is_special(i)) vocab[static_cast<size_t>(i)] = tokenizer.token_bytes(i);
  }
  std::vector<int32_t> stops;
  for (int32_t e : eos_token_ids)
    if (e >= 0 && e < vocab_size) stops.push_back(e);
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW,
                                 static_cast<int>(std::max<int64_t>(vocab_size, n)), stops,
                                 /*add_prefix_space=*/false);
}

RequestError grammar_timeout_error(const StructuredOutputParams& p,
                                  std::chrono::milliseconds timeout) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", static_cast<double>(timeout.count()) / 1000.0);
  return RequestError(RequestErrorKind::InvalidRequest,
                      std::string("compiling the grammar of '") + p.field + "' took longer than " +
                          secs + " s; simplify the " + structured_output_kind_name(p.kind) +
                          " or retry later (the compile goes on; an identical request reuses it)",
                      p.field);
}

GrammarCompilerService::GrammarCompilerService(const Tokenizer& tokenizer,
                                               std::vector<int32_t> eos_token_ids,
                                               int64_t vocab_size, std::function<void()> on_done,
                                               int num_workers, int64_t cache_bytes)
    : tokenizer_(tokenizer), eos_token_ids_(std::move(eos_token_ids)), vocab_size_(vocab_size),
      on_done_(std::move(on_done)), cache_bytes_(cache_bytes) {
  for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { work(); });
}

GrammarCompilerService::~GrammarCompilerService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void GrammarCompilerService::set_before_compile(
    std::function<void(const StructuredOutputParams&)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  before_compile_ = std::move(hook);
}

std::chrono::milliseconds GrammarCompilerService::compile_timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compile_timeout_;
}

void GrammarCompilerService::set_compile_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  compile_timeout_ = timeout;
}

GrammarCompilerService::CacheStats GrammarCompilerService::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats st;
  for (const auto& [key, e] : cache_) st.num_entries += e.done ? 1 : 0;
  st.bytes = cached_bytes_;
  return st;
}

xgrammar::GrammarCompiler& GrammarCompilerService::compiler() {
  std::call_once(compiler_once_, [this] {
    // xgrammar's own cache is off: ours (by key) sits in front of it. Two threads inside one
    // compile (its token-mask precomputation).
    tokenizer_info_ = std::make_unique<xgrammar::TokenizerInfo>(
        make_tokenizer_info(tokenizer_, eos_token_ids_, vocab_size_));
    compiler_ = std::make_unique<xgrammar::GrammarCompiler>(*tokenizer_info_, /*max_threads=*/2,
                                                            /*cache_enabled=*/false);
  });
  return *compiler_;
}

CompiledGrammarPtr GrammarCompilerService::compile_one(const StructuredOutputParams& p) {
  xgrammar::GrammarCompiler& c = compiler();
  const xgrammar::Grammar grammar = build_grammar(p, tokenizer_info_.get());  // RequestError
  try {
    return std::make_shared<const xgrammar::CompiledGrammar>(c.CompileGrammar(grammar));
  } catch (const std::exception& e) {
    throw RequestError(RequestErrorKind::InvalidRequest,
                       std::string("invalid ") + structured_output_kind_name(p.kind) + " for '" +
                           p.field + "': " + xgrammar_error_message(e.what()),
                       p.field);
  }
}

CompiledGrammarPtr GrammarCompilerService::compile_now(const StructuredOutputParams& p,
                                                       double* ms) {
  compiler();  // the TokenizerInfo is not part of the compile time
  const auto t0 = std::chrono::steady_clock::now();
  CompiledGrammarPtr g = compile_one(p);
  if (ms)
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

std::shared_future<CompiledGrammarPtr> GrammarCompilerService::compile(
    const StructuredOutputParams& p) {
  std::string key = structured_output_key(p);
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point wanted_until = Clock::now() + compile_timeout_;
  if (auto it = cache_.find(key); it != cache_.end()) {
    Entry& e = it->second;
    lru_.splice(lru_.begin(), lru_, e.lru);
    if (!e.done) e.wanted_until = std::max(e.wanted_until, wanted_until);
    return e.future;
  }
  Job job;
  job.key = key;
  job.id = next_job_id_++;
  job.params = p;
  std::shared_future<CompiledGrammarPtr> f = job.promise.get_future().share();
  lru_.push_front(key);
  Entry e;
  e.future = f;
  e.job_id = job.id;
  e.wanted_until = wanted_until;
  e.lru = lru_.begin();
  cache_.emplace(std::move(key), std::move(e));
  jobs_.push_back(std::move(job));
  cv_.notify_one();
  return f;
}

void GrammarCompilerService::erase_entry(std::unordered_map<std::string, Entry>::iterator it) {
  if (it->second.done) cached_bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  cache_.erase(it);
}

void GrammarCompilerService::finish_job(const Job& job, const CompiledGrammarPtr& grammar) {
  const auto it = cache_.find(job.key);
  if (it == cache_.end() || it->second.job_id != job.id) return;
  Entry& e = it->second;
  e.done = true;
  e.bytes = static_cast<int64_t>(job.key.size()) +
            (grammar ? static_cast<int64_t>(grammar->MemorySizeBytes()) : 0);
  cached_bytes_ += e.bytes;
  if (e.bytes > cache_bytes_) {  // its requesters hold the future; the cache does not keep it
    erase_entry(it);
    return;
  }
  // Least recently used first; compiles in flight hold no bytes yet and stay.
  for (auto k = lru_.end(); cached_bytes_ > cache_bytes_ && k != lru_.begin();) {
    const auto cur = std::prev(k);
    const auto victim = cache_.find(*cur);
    if (victim != it && victim->second.done)
      erase_entry(victim);  // k (the node after cur) stays valid
    else
      k = cur;
  }
}

void GrammarCompilerService::work() {
  for (;;) {
    Job job;
    std::function<void(const StructuredOutputParams&)> hook;
    std::chrono::milliseconds timeout{};
    bool abandoned = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;  // queued jobs' promises break: their futures throw
      job = std::move(jobs_.front());
      jobs_.pop_front();
      hook = before_compile_;
      timeout = compile_timeout_;
      // Every request that wanted this compile has given up waiting: drop it unstarted (a
      // later request for the same spec submits it again).
      const auto it = cache_.find(job.key);
      if (it != cache_.end() && it->second.job_id == job.id &&
          Clock::now() > it->second.wanted_until) {
        erase_entry(it);
        abandoned = true;
      }
    }
    CompiledGrammarPtr grammar;
    std::exception_ptr error;
    if (abandoned) {
      error = std::make_exception_ptr(grammar_timeout_error(job.params, timeout));
    } else {
      try {
        if (hook) hook(job.params);
        grammar = compile_one(job.params);
      } catch (...) {
        error = std::current_exception();
      }
      // The cache is settled before the future is, so a requester that sees the result also
      // sees cache_stats() counting it.
      std::lock_guard<std::mutex> lock(mu_);
      finish_job(job, grammar);
    }
    if (error)
      job.promise.set_exception(error);
    else
      job.promise.set_value(grammar);
    if (on_done_) on_done_();
  }
}

GrammarState::GrammarState(const CompiledGrammarPtr& grammar)
    : grammar_(grammar), matcher_(*grammar),
      bitmask_(static_cast<size_t>(
          xgrammar::GetBitmaskSize(grammar->GetTokenizerInfo().GetVocabSize()))) {}

void GrammarState::fill_bitmask() noexcept {
  int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
  DLTensor t{};
  t.data = bitmask_.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  try {
    fill_error_.clear();
    matcher_.FillNextTokenBitmask(&t);
  } catch (const std::exception& e) {
    fill_error_ = xgrammar_error_message(e.what());
  } catch (...) {
    fill_error_ = "unknown error";
  }
}

}  // namespace octet
