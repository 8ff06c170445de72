// Engine facade and the engine thread: schedule -> execute -> update (engine/engine.h).
#include "engine/engine.h"

#include <cmath>
#include <fstream>
#include <future>
#include <iostream>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "engine/detokenizer.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace octet {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

TokenLogprobs to_token_logprobs(const SampleResult& r) {
  TokenLogprobs t;
  t.token_id = r.token_id;
  t.logprob = r.logprob;
  t.rank = r.rank;
  for (const TokenLogprob& x : r.top_logprobs) t.top.emplace_back(x.token_id, x.logprob);
  return t;
}

// The chat template a front end renders messages with: GGUF tokenizer.chat_template, or
// tokenizer_config.json's chat_template (a string, or a list of {name, template} whose
// "default" entry is used).
std::string find_chat_template(const LoadedModel& m) {
  if (m.gguf) return m.gguf->get_string("tokenizer.chat_template", "");
  std::ifstream in(m.path + "/tokenizer_config.json");
  if (!in) return "";
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  const auto it = j.find("chat_template");
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array())
    for (const auto& e : *it)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  return "";
}

}  // namespace

// Per-request state the engine thread keeps beside the scheduler's Request.
struct RequestState {
  std::shared_ptr<RequestStream> stream;
  std::mt19937_64 rng;
  std::unique_ptr<RequestDetokenizer> detok;
  Clock::time_point arrival;
  Clock::time_point first_scheduled;
  Clock::time_point first_token;
  bool scheduled_once = false;
  bool produced_first = false;
  int64_t num_cached_tokens = 0;
  std::vector<TokenLogprobs> prompt_logprobs;  // [num_prompt_tokens] when requested
};

struct Engine::Impl {
  EngineArgs args;
  std::unique_ptr<LoadedModel> loaded;
  KVCacheSetup setup;
  std::unique_ptr<PagedKVCache> cache;
  std::unique_ptr<KVCacheManager> kv;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ModelRunner> runner;
  std::vector<KVLayerInfo> layer_info;
  std::string report;
  std::string chat_template;

  // Shared between callers and the engine thread (guarded by mu).
  mutable std::mutex mu;
  std::condition_variable cv;       // wakes the engine thread
  mutable std::condition_variable idle_cv;  // wakes wait_idle
  std::vector<std::pair<std::unique_ptr<Request>, RequestState>> inbox;
  std::vector<std::string> abort_inbox;
  std::unordered_set<std::string> live_ids;  // queued or running
  bool stopping = false;
  bool accepting = true;
  // The scheduler's waiting queue as of the last refresh_stats, plus the arrivals handed to it
  // since (add_requests' queue limit: sched_waiting + inbox.size() never undercounts).
  int64_t sched_waiting = 0;
  EngineStats stats;
  std::thread thread;

  // Engine thread only.
  std::unordered_map<std::string, RequestState> states;
  // Outputs of this step, pushed after the stats are refreshed, so that a client that sees its
  // request finish also sees its blocks freed in stats().
  std::vector<std::pair<std::shared_ptr<RequestStream>, RequestOutput>> pending;
  void flush_pending() {
    for (auto& [stream, out] : pending) stream->push(std::move(out));
    pending.clear();
  }

  void start();  // load and set up, on the engine thread
  void loop();
  void step();
  void update(const SchedulerOutput& out, const StepLogits& logits);
  void emit(Request& r, const SampleResult& res, bool no_token, Clock::time_point now,
            int64_t& new_prompt_tokens);
  // Takes the id by value: it may name the Request that finish_request frees.
  void finish(std::string id, RequestStatus status, RequestOutput out);
  void fail_all(const std::string& error);
  void refresh_stats(int64_t new_prompt_tokens, int64_t new_generated);
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Engine> Engine::create(const EngineArgs& args) {
  args.validate();
  auto impl = std::make_unique<Impl>();
  Impl* raw = impl.get();
  raw->args = args;
  // Everything that runs OpenMP (weight quantization, KV scale calibration, every step) runs on
  // the engine thread: libgomp keeps one worker pool per thread that opens parallel regions,
  // and idle pools of other threads count as busy threads, which throttles spin-waiting and
  // puts the workers to sleep between the hundreds of regions of one step (2.2x slower decode
  // measured when the model was loaded on the caller's thread).
  std::promise<void> ready;
  std::future<void> loaded = ready.get_future();
  raw->thread = std::thread([raw, &ready] {
    try {
      raw->start();
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    ready.set_value();
    raw->loop();
  });
  try {
    loaded.get();
  } catch (...) {
    raw->thread.join();
    throw;
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

void Engine::Impl::start() {
  Impl& m = *this;
  loaded = load_model(args.model, make_load_options(args.quantization, args.weight_strategy));
  const ModelConfig& c = m.loaded->model->config();
  m.setup = setup_kv_cache(args.cache, args.scheduler.max_model_len, *m.loaded);
  for (const std::string& w : m.setup.warnings) std::cerr << w << "\n";
  m.cache = std::make_unique<PagedKVCache>(m.setup.num_usable_blocks + 1, m.setup.block_size,
                                           c.num_key_value_heads, c.head_dim, m.setup.layers);
  m.kv = std::make_unique<KVCacheManager>(m.setup.num_usable_blocks + 1, m.setup.block_size,
                                          args.cache.enable_prefix_caching, m.setup.cache_salt,
                                          m.setup.max_model_len);
  SchedulerConfig sched = args.scheduler;
  sched.max_model_len = m.setup.max_model_len;
  m.scheduler = std::make_unique<Scheduler>(sched, *m.kv);
  m.runner = std::make_unique<ModelRunner>(*m.loaded->model, *m.cache);
  for (const KVLayerSpec& s : m.setup.layers) {
    KVLayerInfo info;
    info.dtype = kv_cache_dtype_name(s.dtype);
    if (dtype_is_fp8(s.dtype)) info.k_scale = s.k_scale, info.v_scale = s.v_scale;
    info.scale_source = s.scale_source;
    info.sliding_window = s.sliding_window;
    m.layer_info.push_back(std::move(info));
  }
  m.chat_template = find_chat_template(*m.loaded);
  m.report = "model " + args.model + ": " + std::to_string(c.num_hidden_layers) + " layers, " +
             m.loaded->model->linear_format() + " linears, max_model_len " +
             std::to_string(m.setup.max_model_len) + "\n" + m.setup.report;
  m.stats.num_kv_blocks = m.setup.num_usable_blocks;
  m.stats.num_free_kv_blocks = m.setup.num_usable_blocks;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

namespace {

/// A request checked and ready to queue (add_requests), or one finished at once (max_tokens 0
/// without prompt logprobs: nothing for the engine to compute).
struct PreparedRequest {
  std::unique_ptr<Request> req;
  RequestState st;
  bool immediate = false;
};

}  // namespace

std::shared_ptr<RequestStream> Engine::add_request(const std::string& request_id,
                                                   std::vector<int32_t> prompt_token_ids,
                                                   const SamplingParams& params,
                                                   int64_t priority) {
  std::vector<NewRequest> one(1);
  one[0].request_id = request_id;
  one[0].prompt_token_ids = std::move(prompt_token_ids);
  one[0].params = params;
  one[0].priority = priority;
  return add_requests(std::move(one)).front();
}

std::vector<std::shared_ptr<RequestStream>> Engine::add_requests(std::vector<NewRequest> requests,
                                                                 int64_t max_num_waiting) {
  Impl& m = *impl_;
  const int64_t vocab = vocab_size();
  const int64_t limit = m.setup.max_model_len;
  std::vector<PreparedRequest> prepared;
  prepared.reserve(requests.size());
  int64_t num_queued = 0;
  for (NewRequest& nr : requests) {
    const std::string& request_id = nr.request_id;
    const SamplingParams& params = nr.params;
    std::vector<int32_t>& prompt_token_ids = nr.prompt_token_ids;
    params.validate();
    if (request_id.empty()) throw std::invalid_argument("request_id must not be empty");
    if (prompt_token_ids.empty()) throw std::invalid_argument("the prompt has no tokens");
    for (int32_t id : prompt_token_ids)
      if (id < 0 || id >= vocab)
        throw std::invalid_argument("token id " + std::to_string(id) +
                                    " is outside the vocabulary [0, " + std::to_string(vocab) +
                                    ")");
    for (int32_t id : params.stop_token_ids)
      if (id < 0 || id >= vocab)
        throw std::invalid_argument("stop_token_ids: token id " + std::to_string(id) +
                                    " is outside the vocabulary");
    for (const auto& [id, bias] : params.logit_bias)
      if (id < 0 || id >= vocab)
        throw std::invalid_argument("logit_bias: token id " + std::to_string(id) +
                                    " is outside the vocabulary");
    const int64_t n_prompt = static_cast<int64_t>(prompt_token_ids.size());
    if (n_prompt > limit || params.max_tokens > limit - n_prompt)
      throw std::invalid_argument(
          "This model's maximum context length is " + std::to_string(limit) +
          " tokens. However, you requested " +
          // In uint64: n_prompt + max_tokens may exceed INT64_MAX (both are in [0, INT64_MAX]).
          std::to_string(static_cast<uint64_t>(n_prompt) +
                         static_cast<uint64_t>(params.max_tokens)) +
          " tokens (" + std::to_string(n_prompt) + " in the prompt, " +
          std::to_string(params.max_tokens) + " for the completion). Please reduce the length "
          "of the prompt or max_tokens.");

    PreparedRequest pr;
    RequestState& st = pr.st;
    st.stream = std::make_shared<RequestStream>();
    st.arrival = Clock::now();
    st.rng.seed(params.seed >= 0 ? static_cast<uint64_t>(params.seed)
                                 : (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                       std::random_device{}());
    pr.immediate = params.max_tokens == 0 && params.prompt_logprobs < 0;
    if (!pr.immediate) {
      st.detok =
          std::make_unique<RequestDetokenizer>(*m.loaded->tokenizer, prompt_token_ids, params);
      if (params.prompt_logprobs >= 0) {
        // Entry 0 has no logprob; a one-token prompt has no other entry and no logits row.
        st.prompt_logprobs.resize(static_cast<size_t>(n_prompt));
        st.prompt_logprobs[0].token_id = prompt_token_ids[0];
      }
      ++num_queued;
    }
    pr.req = std::make_unique<Request>();
    pr.req->request_id = request_id;
    pr.req->prompt_token_ids = std::move(prompt_token_ids);
    pr.req->sampling_params = params;
    pr.req->priority = nr.priority;
    prepared.push_back(std::move(pr));
  }

  std::vector<std::shared_ptr<RequestStream>> streams;
  streams.reserve(prepared.size());
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.accepting || !m.stats.alive)
      throw std::runtime_error(m.stats.alive ? "the engine is shutting down"
                                             : "the engine has stopped after an internal error");
    const int64_t waiting = m.sched_waiting + static_cast<int64_t>(m.inbox.size());
    if (max_num_waiting >= 0 && num_queued > 0 && waiting + num_queued > max_num_waiting)
      throw EngineOverloaded(waiting, max_num_waiting);
    // Ids: unique among the live ones and within the group, checked before anything is queued.
    std::unordered_set<std::string> group;
    for (const PreparedRequest& pr : prepared) {
      if (pr.immediate) continue;
      const std::string& id = pr.req->request_id;
      if (m.live_ids.count(id) || !group.insert(id).second)
        throw std::invalid_argument("request id '" + id + "' is already in use");
    }
    for (PreparedRequest& pr : prepared) {
      streams.push_back(pr.st.stream);
      if (pr.immediate) {
        // Nothing to compute: finished at once (OpenAI's max_tokens 0).
        RequestOutput out;
        out.request_id = pr.req->request_id;
        out.finished = true;
        out.finish_reason = "length";
        out.num_prompt_tokens = static_cast<int64_t>(pr.req->prompt_token_ids.size());
        pr.st.stream->push(std::move(out));
        continue;
      }
      m.live_ids.insert(pr.req->request_id);
      m.inbox.emplace_back(std::move(pr.req), std::move(pr.st));
    }
  }
  if (num_queued > 0) m.cv.notify_all();
  return streams;
}

void Engine::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->live_ids.count(request_id)) return;
    impl_->abort_inbox.push_back(request_id);
  }
  impl_->cv.notify_all();
}

void Engine::abort_all() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const std::string& id : impl_->live_ids) impl_->abort_inbox.push_back(id);
  }
  impl_->cv.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

const std::vector<KVLayerInfo>& Engine::kv_layers() const { return impl_->layer_info; }
const std::string& Engine::startup_report() const { return impl_->report; }

std::vector<int32_t> Engine::tokenize(const std::string& text, bool add_special_tokens) const {
  return impl_->loaded->tokenizer->encode(text, add_special_tokens, /*parse_special=*/true);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  for (int32_t id : ids)
    if (id < 0 || id >= impl_->loaded->tokenizer->vocab_size())
      throw std::invalid_argument("token id " + std::to_string(id) +
                                  " is outside the vocabulary");
  return impl_->loaded->tokenizer->decode(ids, skip_special_tokens);
}

const std::string& Engine::chat_template() const { return impl_->chat_template; }

std::string Engine::bos_token() const {
  const Tokenizer& t = *impl_->loaded->tokenizer;
  return t.bos_id() >= 0 ? t.token_text(t.bos_id()) : "";
}

std::string Engine::eos_token() const {
  const Tokenizer& t = *impl_->loaded->tokenizer;
  return t.eos_id() >= 0 ? t.token_text(t.eos_id()) : "";
}

int64_t Engine::max_model_len() const { return impl_->setup.max_model_len; }
int64_t Engine::vocab_size() const { return impl_->loaded->model->config().vocab_size; }
const std::string& Engine::model_path() const { return impl_->args.model; }
std::string Engine::linear_format() const { return impl_->loaded->model->linear_format(); }

void Engine::stop_accepting() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->accepting = false;
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->idle_cv.wait_for(lock, timeout, [&] { return impl_->live_ids.empty(); });
}

// ---- engine thread ----

void Engine::Impl::loop() {
  for (;;) {
    std::vector<std::pair<std::unique_ptr<Request>, RequestState>> arrivals;
    std::vector<std::string> aborts;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] {
        return stopping || !inbox.empty() || !abort_inbox.empty() || !states.empty();
      });
      if (stopping) break;
      arrivals.swap(inbox);
      aborts.swap(abort_inbox);
      sched_waiting += static_cast<int64_t>(arrivals.size());
    }
    try {
      for (auto& [req, st] : arrivals) {
        const std::string id = req->request_id;
        states.emplace(id, std::move(st));
        scheduler->add_request(std::move(req));
      }
      for (const std::string& id : aborts) {
        if (!states.count(id)) continue;
        RequestOutput out;
        out.finish_reason = "abort";
        finish(id, RequestStatus::FinishedAborted, std::move(out));
      }
      if (!states.empty()) {
        step();
      } else {
        refresh_stats(0, 0);
      }
      flush_pending();
    } catch (const std::exception& e) {
      std::cerr << "octet engine: internal error, stopping: " << e.what() << "\n";
      fail_all(std::string("internal error: ") + e.what());
      refresh_stats(0, 0);
      flush_pending();
      return;
    }
  }
  fail_all("");  // shutdown: unfinished requests end with "abort"
  flush_pending();
}

void Engine::Impl::step() {
  const SchedulerOutput out = scheduler->schedule();
  if (out.scheduled.empty()) {
    // Nothing fits this step (cannot happen while the budget holds one max_model_len
    // sequence and nothing else runs); avoid spinning.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    refresh_stats(0, 0);
    return;
  }
  const Clock::time_point scheduled_at = Clock::now();  // queue time ends here, not after the step
  for (Request* r : out.scheduled) {
    RequestState& st = states.at(r->request_id);
    if (!st.scheduled_once) {
      st.scheduled_once = true;
      st.first_scheduled = scheduled_at;
      st.num_cached_tokens = std::max<int64_t>(r->num_cached_tokens, 0);
    }
  }
  const StepLogits logits = runner->execute(out, *kv);
  update(out, logits);
}

// A request's failure (a non-finite logit, a sampler error, any exception from its own
// logprobs, detokenizer or stop strings) fails that request alone: its stream ends with
// RequestOutput::error, its blocks are freed, and the other requests of the step go on.
void Engine::Impl::update(const SchedulerOutput& out, const StepLogits& logits) {
  const Clock::time_point now = Clock::now();
  const std::vector<int32_t>& eos_ids = loaded->eos_token_ids;
  struct Sampled {
    Request* req;
    SampleResult res;
    bool no_token;      // max_tokens == 0 with prompt logprobs: finish without sampling
    std::string error;  // non-empty: fail this request (no token was appended)
  };
  std::vector<Sampled> sampled;
  int64_t new_prompt_tokens = 0;
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    Request& r = *out.scheduled[i];
    RequestState& st = states.at(r.request_id);
    const SamplingParams& p = r.sampling_params;
    try {
      if (logits.prompt_row_begin[i] >= 0) {
        const int64_t n_prompt = static_cast<int64_t>(r.prompt_token_ids.size());
        st.prompt_logprobs.resize(static_cast<size_t>(n_prompt));
        st.prompt_logprobs[0].token_id = r.prompt_token_ids[0];
        for (int64_t k = 0; k < logits.prompt_row_count[i]; ++k) {
          const int64_t pos = logits.prompt_pos_begin[i] + k;
          const int32_t next = r.prompt_token_ids[pos + 1];
          const SampleResult lp = logprobs_for(logits.row(logits.prompt_row_begin[i] + k),
                                               logits.vocab, next, p.prompt_logprobs);
          if (!lp.ok()) throw std::runtime_error("prompt logprobs: " + lp.error);
          st.prompt_logprobs[pos + 1] = to_token_logprobs(lp);
        }
      }
      if (logits.sample_row[i] < 0) continue;
      if (p.max_tokens == 0) {
        sampled.push_back({&r, SampleResult{}, true, ""});
        continue;
      }
      SampleResult res = sample(logits.row(logits.sample_row[i]), logits.vocab, p,
                                r.prompt_token_ids, r.output_token_ids, eos_ids, st.rng);
      if (!res.ok()) throw std::runtime_error("sampling: " + res.error);
      r.append_output_token(res.token_id);
      sampled.push_back({&r, std::move(res), false, ""});
    } catch (const std::exception& e) {
      sampled.push_back({&r, SampleResult{}, false, e.what()});
    }
  }
  scheduler->update(out);

  int64_t new_generated = 0;
  for (Sampled& s : sampled) {
    Request& r = *s.req;
    const std::string id = r.request_id;
    try {
      if (!s.error.empty()) throw std::runtime_error(s.error);
      new_generated += s.no_token ? 0 : 1;
      emit(r, s.res, s.no_token, now, new_prompt_tokens);
    } catch (const std::exception& e) {
      std::cerr << "octet engine: request " << id << " failed: " << e.what() << "\n";
      RequestOutput o;
      o.finish_reason = "abort";
      o.error = e.what();
      finish(id, RequestStatus::FinishedAborted, std::move(o));
    }
  }
  refresh_stats(new_prompt_tokens, new_generated);
}

// The output of request r for this step (its token `res`, or none when `no_token`): text,
// logprobs, stop checks; finishes it when it stopped.
void Engine::Impl::emit(Request& r, const SampleResult& res, bool no_token,
                        Clock::time_point now, int64_t& new_prompt_tokens) {
  RequestState& st = states.at(r.request_id);
  const SamplingParams& p = r.sampling_params;
  const std::vector<int32_t>& eos_ids = loaded->eos_token_ids;
  RequestOutput o;
  o.request_id = r.request_id;
  o.num_prompt_tokens = static_cast<int64_t>(r.prompt_token_ids.size());
  o.num_cached_tokens = st.num_cached_tokens;
  if (!st.produced_first) {
    st.produced_first = true;
    st.first_token = now;
    new_prompt_tokens += o.num_prompt_tokens;
    if (p.prompt_logprobs >= 0) o.prompt_logprobs = std::move(st.prompt_logprobs);
  }
  RequestStatus status = RequestStatus::Running;
  if (no_token) {
    status = RequestStatus::FinishedLength;
  } else {
    const int32_t tok = res.token_id;
    const int64_t n_out = static_cast<int64_t>(r.output_token_ids.size());
    o.token_ids.push_back(tok);
    if (p.logprobs >= 0) o.logprobs.push_back(to_token_logprobs(res));
    const bool may_stop = n_out >= p.min_tokens;
    bool is_eos = false;
    for (int32_t e : eos_ids) is_eos |= e == tok;
    bool is_stop_token = false;
    for (int32_t e : p.stop_token_ids) is_stop_token |= e == tok;
    if (may_stop && is_eos && !p.ignore_eos) {
      status = RequestStatus::FinishedStopped;
    } else if (may_stop && is_stop_token) {
      status = RequestStatus::FinishedStopped;
      o.stop_reason = std::to_string(tok);
    }
    if (status == RequestStatus::FinishedStopped) {
      // The stop token's text is dropped (unless include_stop_str_in_output) and held-back
      // text is flushed.
      o.text = st.detok->push(tok, /*stop_terminated=*/true).text;
    } else {
      DetokenizeStep d = st.detok->push(tok);
      o.text = std::move(d.text);
      if (d.stopped) {
        status = RequestStatus::FinishedStopped;
        o.stop_reason = d.stop_str;
      } else if (n_out >= p.max_tokens || r.num_tokens() >= setup.max_model_len) {
        status = RequestStatus::FinishedLength;
        o.text += st.detok->finish();  // held-back text is final now
      }
    }
  }
  if (status == RequestStatus::Running) {
    o.num_generated_tokens = static_cast<int64_t>(r.output_token_ids.size());
    pending.emplace_back(st.stream, std::move(o));
  } else {
    o.finish_reason = status == RequestStatus::FinishedLength ? "length" : "stop";
    finish(r.request_id, status, std::move(o));
  }
}

// Frees the request's blocks at once, ends its stream with `out` (finished), forgets it.
void Engine::Impl::finish(std::string id, RequestStatus status, RequestOutput out) {
  auto it = states.find(id);
  if (it == states.end()) return;
  RequestState& st = it->second;
  const Clock::time_point now = Clock::now();
  if (Request* r = scheduler->get(id)) {
    out.num_prompt_tokens = static_cast<int64_t>(r->prompt_token_ids.size());
    out.num_generated_tokens = static_cast<int64_t>(r->output_token_ids.size());
  }
  out.request_id = id;
  out.finished = true;
  out.num_cached_tokens = st.num_cached_tokens;
  out.queue_time_s = st.scheduled_once ? seconds_between(st.arrival, st.first_scheduled) : 0.0;
  out.first_token_time_s = st.produced_first ? seconds_between(st.arrival, st.first_token) : 0.0;
  out.e2e_time_s = seconds_between(st.arrival, now);
  scheduler->finish_request(id, status);
  pending.emplace_back(st.stream, std::move(out));
  states.erase(it);
  {
    std::lock_guard<std::mutex> lock(mu);
    live_ids.erase(id);
  }
  idle_cv.notify_all();
}

void Engine::Impl::fail_all(const std::string& error) {
  std::vector<std::string> ids;
  for (const auto& kvp : states) ids.push_back(kvp.first);
  for (const std::string& id : ids) {
    RequestOutput out;
    out.finish_reason = "abort";
    out.error = error;
    try {
      finish(id, RequestStatus::FinishedAborted, std::move(out));
    } catch (const std::exception&) {
      states.erase(id);
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [req, st] : inbox) {
    RequestOutput out;
    out.request_id = req->request_id;
    out.finished = true;
    out.finish_reason = "abort";
    out.error = error;
    st.stream->push(std::move(out));
  }
  inbox.clear();
  live_ids.clear();
  if (!error.empty()) stats.alive = false;
  accepting = false;
  idle_cv.notify_all();
}

void Engine::Impl::refresh_stats(int64_t new_prompt_tokens, int64_t new_generated) {
  const SchedulerStats s = scheduler->stats();
  std::lock_guard<std::mutex> lock(mu);
  stats.num_requests_running = s.num_running;
  sched_waiting = s.num_waiting;
  stats.num_requests_waiting = s.num_waiting + static_cast<int64_t>(inbox.size());
  stats.num_preemptions = s.num_preemptions;
  stats.kv_cache_usage = s.kv_cache_usage;
  stats.num_free_kv_blocks = kv->num_free_blocks();
  stats.prefix_cache_queries = s.prefix_cache_queries;
  stats.prefix_cache_hits = s.prefix_cache_hits;
  stats.prompt_tokens += new_prompt_tokens;
  stats.generation_tokens += new_generated;
  ++stats.num_steps;
}

}  // namespace octet
