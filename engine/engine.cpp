// Engine facade and the engine thread: schedule -> execute -> update (engine/engine.h).
#include "engine/engine.h"

#include <filesystem>
#include <future>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "engine/detokenizer.h"
#include "engine/grammar_compiler.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_cache_setup.h"
#include "engine/kv_saturation.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/node_agreement.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kernels/launch_counter.h"
#include "kernels/rank_group.h"

namespace octet {

using Clock = EngineClock;

struct Engine::Impl {
  EngineArgs args;
  std::unique_ptr<LoadedModel> loaded;
  KVCacheSetup setup;
  std::unique_ptr<KVCacheManager> kv;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<HostChannel> steps;  // multi-node: node 0 -> the others, every step
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<OutputProcessor> outputs;  // sampling, stops, text; the request records
  std::unique_ptr<KVSaturationSampler> saturation;  // sampled FP8 clipping counts (/metrics)
  std::vector<KVLayerInfo> layer_info;
  std::string report;

  // Shared between callers and the engine thread (guarded by mu).
  mutable std::mutex mu;
  std::condition_variable cv;       // wakes the engine thread
  mutable std::condition_variable idle_cv;  // wakes wait_idle
  std::vector<std::pair<std::unique_ptr<Request>, RequestState>> inbox;
  std::vector<std::string> abort_inbox;
  std::unordered_set<std::string> live_ids;  // queued or running
  bool stopping = false;
  bool grammar_ready = false;  // a grammar compile finished: the engine thread polls `compiling`
  bool accepting = true;
  // The scheduler's waiting queue as of the last refresh_stats, plus the arrivals handed to it
  // since (add_requests' queue limit: sched_waiting + inbox.size() never undercounts).
  int64_t sched_waiting = 0;
  EngineStats stats;
  std::thread thread;

  // Engine thread only.
  // Outputs of this step, pushed after the stats are refreshed, so that a client that sees its
  // request finish also sees its blocks freed in stats().
  std::vector<std::pair<std::shared_ptr<RequestStream>, RequestOutput>> pending;
  // Structured-output requests whose grammar is compiling: not in the scheduler yet (nothing
  // waits on them; the others are scheduled as usual), but in `outputs` (aborts, stats).
  struct PendingGrammar {
    std::unique_ptr<Request> req;
    std::shared_future<CompiledGrammarPtr> grammar;
    Clock::time_point deadline;  // fails with a 400 when still compiling then
    std::chrono::milliseconds timeout;
  };
  std::vector<PendingGrammar> compiling;
  void admit(std::unique_ptr<Request> req, RequestState st);
  void poll_compiles();
  void flush_pending() {
    for (auto& [stream, out] : pending) stream->push(std::move(out));
    pending.clear();
  }

  void start();  // load and set up, on the engine thread
  void loop();
  void step();
  // Takes the id by value: it may name the Request that finish_request frees.
  void finish(std::string id, RequestStatus status, RequestOutput out);
  void fail_all(const std::string& error);
  void refresh_stats(int64_t new_prompt_tokens, int64_t new_generated, int64_t step_tokens = 0);

  // Last: destroyed first, joining its workers while mu and cv (which on_done uses) live.
  std::unique_ptr<GrammarCompilerService> grammars;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}


std::unique_ptr<Engine> Engine::create(const EngineArgs& args) {
  args.validate();
  if (args.multinode.nnodes > 1 && args.multinode.node_rank != 0)
    throw std::invalid_argument("--node-rank " + std::to_string(args.multinode.node_rank) +
                                ": only node 0 runs the engine's scheduler; the other nodes "
                                "follow it (Engine::run_follower)");
  if (args.multinode.nnodes > 1 && !args.multinode.exchange_id)
    throw std::invalid_argument(multinode_unsupported_message(args.multinode.nnodes));
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
  LoadOptions load_options = make_load_options(args.quantization, args.weight_strategy);
  load_options.device = args.device;
  load_options.world_size = static_cast<int>(args.tensor_parallel_size);
  load_options.lm_head_dtype = args.lm_head_dtype;
  if (args.count_kernel_launches && args.tensor_parallel_size == 1 &&
      resolve_device(args.device) == "cpu")
    load_options.backend = std::make_shared<LaunchCounter>(make_backend("cpu"));
  const std::string threads = configure_cpu_threads(static_cast<int>(args.threads));
  load_options.placement.nnodes = static_cast<int>(args.multinode.nnodes);
  load_options.placement.node_rank = static_cast<int>(args.multinode.node_rank);
  load_options.placement.exchange_id = args.multinode.exchange_id;
  const MultiNodeConfig& mn = args.multinode;
  if (mn.nnodes > 1) {
    // First, before anything runs a collective: the step channel, and the same flags on
    // every node (a node that skipped a start-up pass would leave the others waiting in it).
    steps = make_host_channel(mn.master_addr, static_cast<int>(mn.step_port()),
                              static_cast<int>(mn.node_rank), static_cast<int>(mn.nnodes),
                              kMultiNodeConnectTimeoutMs, "step broadcast");
    const std::string flags = shared_engine_flags(args);
    agree_with_node0(*steps, flags, [&](const std::string& node0) {
      return first_difference(flags, node0, "the flags");
    });
    load_options.placement.master_addr = mn.master_addr;
    load_options.placement.cpu_collective_port = static_cast<int>(mn.cpu_collective_port());
  }
  loaded = load_model(model_source(args), load_options);
  const ModelConfig& c = m.loaded->model->config();
  m.setup = setup_kv_cache(args.cache, args.scheduler, *m.loaded,
                           /*cuda_graphs=*/!args.enforce_eager);  // the graphs' reserve
  for (const std::string& w : m.setup.warnings) spdlog::warn("{}", w);
  m.kv = std::make_unique<KVCacheManager>(m.setup.num_usable_blocks + 1, m.setup.layout,
                                          args.cache.enable_prefix_caching, m.setup.cache_salt,
                                          m.setup.max_model_len);
  SchedulerConfig sched = args.scheduler;
  sched.max_model_len = m.setup.max_model_len;
  m.scheduler = std::make_unique<Scheduler>(sched, *m.kv);
  // Every rank's cache: the same blocks (counted once by the KV manager), its KV heads.
  m.runner = std::make_unique<ModelRunner>(*m.loaded, m.setup.num_usable_blocks + 1,
                                           m.setup.layout, m.setup.layers,
                                           sched.max_num_batched_tokens, sched.max_num_seqs,
                                           DecodeGraphOptions{!args.enforce_eager,
                                                              m.setup.max_model_len});
  if (args.prefault_kv_cache) m.runner->prefault_kv_cache();
  if (steps) {
    // Node 0's blocks must exist on every node (budgets may differ between machines).
    const std::string kv = "block_size=" + std::to_string(m.setup.block_size) +
                           "\nmax_model_len=" + std::to_string(m.setup.max_model_len) + "\n";
    const int64_t blocks = m.setup.num_usable_blocks;
    agree_with_node0(*steps, kv + "blocks=" + std::to_string(blocks) + "\n",
                     [&](const std::string& node0) {
      const std::string e =
          first_difference(kv, node0.substr(0, kv.size()), "the KV cache settings");
      if (!e.empty()) return e;
      const int64_t theirs = std::stoll(node0.substr(node0.find("blocks=") + 7));
      if (blocks < theirs)
        return "the KV cache has " + std::to_string(blocks) + " blocks, node 0 " +
               std::to_string(theirs) + " (give every node the same --kv-cache-memory-bytes)";
      return std::string();
    });
    if (mn.node_rank == 0) m.runner->broadcast_steps(steps.get());
  }
  m.outputs = std::make_unique<OutputProcessor>(m.loaded->eos_token_ids, m.setup.max_model_len);
  for (const KVLayerSpec& s : m.setup.layers) {
    KVLayerInfo info;
    info.dtype = kv_cache_dtype_name(s.dtype);
    if (dtype_is_fp8(s.dtype) && !s.per_token_head)  // per-token-head: no fixed scale to show
      info.k_scale = s.k_scale, info.v_scale = s.v_scale;
    info.scale_source = s.scale_source;
    info.sliding_window = s.sliding_window;
    m.layer_info.push_back(std::move(info));
  }
  m.report = threads + "\n" + "model " + args.model + ": " + std::to_string(c.num_hidden_layers) + " layers, " +
             m.loaded->model->linear_format() + " linears, max_model_len " +
             std::to_string(m.setup.max_model_len) + "\n" + m.setup.report;
  m.stats.num_kv_blocks = m.setup.num_usable_blocks;
  m.stats.num_free_kv_blocks = m.setup.num_usable_blocks;
  // Tokens every group can hold (the start-up line's count; vLLM's blocks x block_size /
  // groups when the groups' block sizes are equal).
  m.stats.kv_cache_size_tokens =
      m.setup.budget_bytes / std::max<int64_t>(1, m.setup.memory.kv_bytes_per_token);
  m.stats.kv_cache_max_concurrency =
      m.setup.layout.hybrid()
          ? static_cast<double>(m.setup.num_usable_blocks) /
                static_cast<double>(blocks_held(m.setup.layout, m.setup.max_model_len, 1))
          : static_cast<double>(m.stats.kv_cache_size_tokens) /
                static_cast<double>(m.setup.max_model_len);
  m.saturation = std::make_unique<KVSaturationSampler>(m.setup.layers);
  m.stats.kv_saturation = m.saturation->counts();
  m.grammars = std::make_unique<GrammarCompilerService>(
      *m.loaded->tokenizer, m.loaded->eos_token_ids, c.vocab_size, [this] {
        {
          std::lock_guard<std::mutex> lock(mu);
          grammar_ready = true;
        }
        cv.notify_all();
      });
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

/// While fewer than min_tokens tokens are generated, the sampler masks EOS and stop_token_ids;
/// when they are every id of the vocabulary nothing could be sampled (a 500 in every step):
/// RequestError naming min_tokens instead.
void check_min_tokens_samplable(const SamplingParams& params, const std::vector<int32_t>& eos_ids,
                                int64_t vocab) {
  if (params.min_tokens <= 0) return;
  const size_t masked_max = params.stop_token_ids.size() + eos_ids.size();
  if (static_cast<int64_t>(masked_max) < vocab) return;  // cheap: too few ids to cover it
  std::vector<char> masked(static_cast<size_t>(vocab), 0);
  int64_t count = 0;
  for (const std::vector<int32_t>* ids : {&eos_ids, &params.stop_token_ids})
    for (int32_t id : *ids)
      if (id >= 0 && id < vocab && !masked[static_cast<size_t>(id)]) {
        masked[static_cast<size_t>(id)] = 1;
        ++count;
      }
  if (count < vocab) return;
  throw RequestError(RequestErrorKind::InvalidRequest,
                     "'min_tokens' " + std::to_string(params.min_tokens) +
                         " cannot be met: EOS and 'stop_token_ids' cover all " +
                         std::to_string(vocab) +
                         " tokens of the vocabulary, so no token could be generated",
                     "min_tokens");
}

// The request rules, checked once here (engine/request_error.h): front ends trust them.
void validate_request(const std::string& request_id, const std::vector<int32_t>& prompt,
                      const SamplingParams& params, int64_t vocab, int64_t max_model_len,
                      const std::vector<int32_t>& eos_ids) {
  params.validate();
  if (request_id.empty())
    throw RequestError(RequestErrorKind::InvalidRequest, "request_id must not be empty");
  if (prompt.empty())
    throw RequestError(RequestErrorKind::InvalidRequest, "the prompt has no tokens", "prompt");
  check_token_ids(prompt, vocab, "prompt");
  validate_token_ids(params, vocab);
  check_min_tokens_samplable(params, eos_ids, vocab);
  check_context_length(static_cast<int64_t>(prompt.size()), params.max_tokens, max_model_len);
}

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
    validate_request(request_id, prompt_token_ids, params, vocab, limit, m.loaded->eos_token_ids);
    const int64_t n_prompt = static_cast<int64_t>(prompt_token_ids.size());

    PreparedRequest pr;
    RequestState& st = pr.st;
    st.stream = std::make_shared<RequestStream>();
    st.arrival = Clock::now();
    st.rng.seed(params.seed ? static_cast<uint64_t>(*params.seed)  // two's complement
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

  // A group larger than the whole queue can never be admitted: a 400, not a retryable 503.
  if (max_num_waiting >= 0 && num_queued > max_num_waiting)
    throw RequestError(RequestErrorKind::InvalidRequest,
                       "the request needs " + std::to_string(num_queued) +
                           " sequences (prompts x n) but at most " +
                           std::to_string(max_num_waiting) +
                           " can wait at once (--max-num-waiting)",
                       "prompt");
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
        throw RequestError(RequestErrorKind::InvalidRequest,
                           "request id '" + id + "' is already in use");
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

const ModelTokenizer& Engine::tokenizer() const { return *impl_->loaded->model_tokenizer; }

int64_t Engine::max_model_len() const { return impl_->setup.max_model_len; }
int64_t Engine::vocab_size() const { return impl_->loaded->model->config().vocab_size; }
int64_t Engine::num_hidden_layers() const {
  return impl_->loaded->model->config().num_hidden_layers;
}
const std::string& Engine::model_path() const { return impl_->args.model; }
std::string Engine::linear_format() const { return impl_->loaded->model->linear_format(); }
int64_t Engine::decode_weight_bytes() const {
  // Every rank reads its own shard per step: the bytes a decode step streams are their sum.
  const LoadedModel& m = *impl_->loaded;
  int64_t bytes = 0;
  for (int r = 0; r < m.world_size(); ++r) bytes += m.rank_model(r).decode_weight_bytes();
  return bytes;
}

int64_t Engine::kv_bytes_per_token() const { return impl_->setup.memory.kv_bytes_per_token; }

int64_t Engine::decode_step_kernels() const { return impl_->runner->decode_step_kernels(); }

double Engine::compile_structured_output(const StructuredOutputParams& p) {
  double ms = 0.0;
  impl_->grammars->compile_now(p, &ms);
  return ms;
}

void Engine::set_structured_output_compile_timeout(std::chrono::milliseconds timeout) {
  impl_->grammars->set_compile_timeout(timeout);
}

void Engine::set_structured_output_compile_hook(
    std::function<void(const StructuredOutputParams&)> hook) {
  impl_->grammars->set_before_compile(std::move(hook));
}

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
      const auto ready = [&] {
        return stopping || !inbox.empty() || !abort_inbox.empty() || grammar_ready ||
               scheduler->has_unfinished_requests();
      };
      if (compiling.empty()) {
        cv.wait(lock, ready);
      } else {  // wake at the first grammar deadline (poll_compiles fails that request)
        Clock::time_point first = compiling.front().deadline;
        for (const PendingGrammar& g : compiling) first = std::min(first, g.deadline);
        cv.wait_until(lock, first, ready);
      }
      if (stopping) break;
      grammar_ready = false;
      arrivals.swap(inbox);
      aborts.swap(abort_inbox);
      sched_waiting += static_cast<int64_t>(arrivals.size());
    }
    try {
      for (auto& [req, st] : arrivals) admit(std::move(req), std::move(st));
      for (const std::string& id : aborts) {
        if (!outputs->find(id)) continue;
        RequestOutput out;
        out.finish_reason = "abort";
        finish(id, RequestStatus::FinishedAborted, std::move(out));
      }
      poll_compiles();
      if (scheduler->has_unfinished_requests()) {
        step();
      } else {
        refresh_stats(0, 0);
      }
      flush_pending();
    } catch (const std::exception& e) {
      spdlog::error("octet engine: internal error, stopping: {}", e.what());
      fail_all(std::string("internal error: ") + e.what());
      refresh_stats(0, 0);
      flush_pending();
      return;
    }
  }
  fail_all("");  // shutdown: unfinished requests end with "abort"
  flush_pending();
  try {
    runner->end_steps();  // multi-node: the other nodes exit
  } catch (const std::exception& e) {
    spdlog::warn("octet engine: could not tell the other nodes to stop: {}", e.what());
  }
}

void Engine::run_follower(const EngineArgs& args) {
  args.validate();
  if (args.multinode.nnodes < 2 || args.multinode.node_rank < 1)
    throw std::invalid_argument("a follower is node 1.. of --nnodes >= 2, got node " +
                                std::to_string(args.multinode.node_rank) + " of " +
                                std::to_string(args.multinode.nnodes));
  // Before connecting (which waits for node 0): a missing model fails at once.
  std::error_code ec;
  if (args.load_format != "dummy" && !std::filesystem::exists(args.model, ec))
    throw std::runtime_error(args.model + ": no such file or directory");
  Impl m;
  m.args = args;
  m.start();
  spdlog::info("octet: node {} of {} ready, following node 0", args.multinode.node_rank,
               args.multinode.nnodes);
  while (m.runner->follow_step(*m.steps)) {
  }
  spdlog::info("octet: node 0 shut down; node {} exiting", args.multinode.node_rank);
}

// A new request goes to the scheduler, or first to `compiling` when its output is constrained.
void Engine::Impl::admit(std::unique_ptr<Request> req, RequestState st) {
  const std::string id = req->request_id;
  outputs->add(id, std::move(st));
  const StructuredOutputParams& so = req->sampling_params.structured_outputs;
  if (!so.active()) {
    scheduler->add_request(std::move(req));
    return;
  }
  const std::chrono::milliseconds timeout = grammars->compile_timeout();
  std::shared_future<CompiledGrammarPtr> grammar = grammars->compile(so);
  compiling.push_back({std::move(req), std::move(grammar), Clock::now() + timeout, timeout});
}

// Requests whose grammar is ready go to the scheduler with a fresh matcher; a grammar that did
// not compile, or is still compiling past the request's deadline, fails its request alone (an
// invalid request, naming the field; the compile goes on in its worker). Never waits.
void Engine::Impl::poll_compiles() {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < compiling.size();) {
    const bool ready =
        compiling[i].grammar.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    if (!ready && now < compiling[i].deadline) {
      ++i;
      continue;
    }
    const std::string id = compiling[i].req->request_id;
    RequestOutput out;
    try {
      if (!ready)
        throw grammar_timeout_error(compiling[i].req->sampling_params.structured_outputs,
                                    compiling[i].timeout);
      outputs->find(id)->grammar = std::make_unique<GrammarState>(compiling[i].grammar.get());
      std::unique_ptr<Request> req = std::move(compiling[i].req);
      compiling.erase(compiling.begin() + static_cast<std::ptrdiff_t>(i));
      scheduler->add_request(std::move(req));
      continue;
    } catch (const RequestError& e) {
      out.error = e.message();
      out.invalid_request = true;
      out.error_param = e.param();
    } catch (const std::exception& e) {
      out.error = std::string("structured output: ") + e.what();
    }
    spdlog::info("octet engine: request {} failed: {}", id, out.error);
    out.finish_reason = "abort";
    finish(id, RequestStatus::FinishedAborted, std::move(out));
  }
}

// schedule -> execute -> update. A request's failure (a non-finite logit, a sampler error, any
// exception from its own logprobs, detokenizer or stop strings) fails that request alone: its
// stream ends with RequestOutput::error, its blocks are freed, the others of the step go on.
void Engine::Impl::step() {
  const SchedulerOutput out = scheduler->schedule();
  if (out.scheduled.empty()) {
    // Nothing fits this step (cannot happen while the budget holds one max_model_len
    // sequence and nothing else runs); avoid spinning.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    refresh_stats(0, 0);
    return;
  }
  outputs->on_scheduled(out, Clock::now());  // queue time ends here, not after the step
  const StepLogits logits = runner->execute(out, *kv, outputs->device_sampling(out, loaded->model->config().vocab_size));
  saturation->after_step(out, *kv, *runner,
                         loaded->model->shard().world_size > 1 ? loaded->ranks.get() : nullptr);
  const Clock::time_point now = Clock::now();
  outputs->sample(out, logits);
  scheduler->update(out);
  int64_t new_prompt_tokens = 0, new_generated = 0;
  for (RequestUpdate& u : outputs->updates(now, &new_prompt_tokens, &new_generated)) {
    if (u.status == RequestStatus::Running) {
      pending.emplace_back(outputs->find(u.request->request_id)->stream, std::move(u.output));
      continue;
    }
    if (!u.output.error.empty())
      spdlog::error("octet engine: request {} failed: {}", u.request->request_id,
                    u.output.error);
    finish(u.request->request_id, u.status, std::move(u.output));
  }
  // vLLM's iteration tokens: the prompts whose first token came this step plus the tokens
  // generated (vllm/v1/metrics/stats.py IterationStats), not the tokens the model computed.
  refresh_stats(new_prompt_tokens, new_generated, new_prompt_tokens + new_generated);
}

// Frees the request's blocks at once, ends its stream with `out` (finished), forgets it.
void Engine::Impl::finish(std::string id, RequestStatus status, RequestOutput out) {
  RequestState* st = outputs->find(id);
  if (!st) return;
  std::unique_ptr<Request> compiling_req;  // a request still waiting for its grammar
  for (size_t i = 0; i < compiling.size(); ++i)
    if (compiling[i].req->request_id == id) {
      compiling_req = std::move(compiling[i].req);
      compiling.erase(compiling.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  out.request_id = id;
  const Request* r = scheduler->get(id);
  OutputProcessor::complete(*st, r ? r : compiling_req.get(), Clock::now(), out);
  scheduler->finish_request(id, status);
  pending.emplace_back(st->stream, std::move(out));
  outputs->erase(id);
  {
    std::lock_guard<std::mutex> lock(mu);
    live_ids.erase(id);
  }
  idle_cv.notify_all();
}

void Engine::Impl::fail_all(const std::string& error) {
  for (const std::string& id : outputs->ids()) {
    RequestOutput out;
    out.finish_reason = "abort";
    out.error = error;
    try {
      finish(id, RequestStatus::FinishedAborted, std::move(out));
    } catch (const std::exception&) {
      outputs->erase(id);
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

void Engine::Impl::refresh_stats(int64_t new_prompt_tokens, int64_t new_generated,
                                 int64_t step_tokens) {
  const SchedulerStats s = scheduler->stats();
  std::lock_guard<std::mutex> lock(mu);
  stats.num_requests_running = s.num_running;
  sched_waiting = s.num_waiting + static_cast<int64_t>(compiling.size());
  stats.num_requests_waiting = sched_waiting + static_cast<int64_t>(inbox.size());
  stats.num_bitmask_fills = outputs->num_bitmask_fills();
  stats.bitmask_fill_s = outputs->bitmask_fill_s();
  stats.num_preemptions = s.num_preemptions;
  stats.kv_cache_usage = s.kv_cache_usage;
  stats.num_free_kv_blocks = kv->num_free_blocks();
  stats.prefix_cache_queries = s.prefix_cache_queries;
  stats.prefix_cache_hits = s.prefix_cache_hits;
  stats.prompt_tokens += new_prompt_tokens;
  stats.generation_tokens += new_generated;
  ++stats.num_steps;
  if (step_tokens > 0) {
    size_t k = 0;  // the smallest k with step_tokens <= 2^k
    while (k + 1 < stats.step_tokens_log2.size() && (int64_t{1} << k) < step_tokens) ++k;
    ++stats.step_tokens_log2[k];
    stats.step_tokens_sum += step_tokens;
  }
  if (saturation && saturation->take_changed()) stats.kv_saturation = saturation->counts();
}

}  // namespace octet
