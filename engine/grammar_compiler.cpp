// Grammar compiler service and per-sequence grammar state on xgrammar (grammar_compiler.h).
#include "engine/grammar_compiler.h"

#include <chrono>
#include <exception>
#include <utility>

#include "engine/request_error.h"
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

GrammarCompilerService::GrammarCompilerService(const Tokenizer& tokenizer,
                                               std::vector<int32_t> eos_token_ids,
                                               int64_t vocab_size, std::function<void()> on_done,
                                               int num_workers)
    : tokenizer_(tokenizer), eos_token_ids_(std::move(eos_token_ids)), vocab_size_(vocab_size),
      on_done_(std::move(on_done)) {
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

xgrammar::GrammarCompiler& GrammarCompilerService::compiler() {
  std::call_once(compiler_once_, [this] {
    // xgrammar's own cache is off: ours (by key) sits in front of it. Two threads inside one
    // compile (its token-mask precomputation).
    compiler_ = std::make_unique<xgrammar::GrammarCompiler>(
        make_tokenizer_info(tokenizer_, eos_token_ids_, vocab_size_), /*max_threads=*/2,
        /*cache_enabled=*/false);
  });
  return *compiler_;
}

CompiledGrammarPtr GrammarCompilerService::compile_one(const StructuredOutputParams& p) {
  const xgrammar::Grammar grammar = build_grammar(p);  // RequestError naming p.field
  try {
    return std::make_shared<const xgrammar::CompiledGrammar>(compiler().CompileGrammar(grammar));
  } catch (const std::exception& e) {
    throw RequestError(RequestErrorKind::InvalidRequest,
                       std::string("invalid ") + structured_output_kind_name(p.kind) + " for '" +
                           p.field + "': " + e.what(),
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
  const std::string key = structured_output_key(p);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Job job;
  job.params = p;
  std::shared_future<CompiledGrammarPtr> f = job.promise.get_future().share();
  jobs_.push_back(std::move(job));
  cache_.emplace(key, f);
  cache_order_.push_back(key);
  while (cache_order_.size() > kMaxCachedGrammars) {
    cache_.erase(cache_order_.front());  // holders of its future keep it alive
    cache_order_.pop_front();
  }
  cv_.notify_one();
  return f;
}

void GrammarCompilerService::work() {
  for (;;) {
    Job job;
    std::function<void(const StructuredOutputParams&)> hook;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;  // queued jobs' promises break: their futures throw
      job = std::move(jobs_.front());
      jobs_.pop_front();
      hook = before_compile_;
    }
    try {
      if (hook) hook(job.params);
      job.promise.set_value(compile_one(job.params));
    } catch (...) {
      job.promise.set_exception(std::current_exception());
    }
    if (on_done_) on_done_();
  }
}

GrammarState::GrammarState(const CompiledGrammarPtr& grammar)
    : grammar_(grammar), matcher_(*grammar),
      bitmask_(static_cast<size_t>(
          xgrammar::GetBitmaskSize(grammar->GetTokenizerInfo().GetVocabSize()))) {}

const int32_t* GrammarState::fill_bitmask() {
  int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
  DLTensor t{};
  t.data = bitmask_.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  matcher_.FillNextTokenBitmask(&t);
  return bitmask_.data();
}

}  // namespace octet
