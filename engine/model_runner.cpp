#include "engine/model_runner.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/device_sampling_env.h"
#include "engine/kv_cache_manager.h"
#include "engine/model_loader.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "kernels/common/check.h"
#include "kernels/launch_counter.h"

namespace octet {

std::vector<int64_t> decode_graph_sizes(int64_t max_num_seqs) {
  std::vector<int64_t> sizes;
  const int64_t top = std::min<int64_t>(max_num_seqs, 512);
  for (int64_t s : {1, 2, 4})
    if (s <= top) sizes.push_back(s);
  for (int64_t s = 8; s <= top; s += 8) sizes.push_back(s);
  return sizes;
}

bool ModelRunner::is_decode_step(const ForwardBatch& batch) {
  const int64_t n = batch.num_tokens();
  if (n == 0 || n != batch.num_seqs() || static_cast<int64_t>(batch.logits_indices.size()) != n)
    return false;
  for (int64_t i = 0; i < n; ++i)
    if (batch.query_start_loc[i] != i || batch.logits_indices[i] != i) return false;
  return true;
}

int64_t ModelRunner::graph_size(const ForwardBatch& batch) const {
  if (graph_sizes_.empty() || batch.max_blocks_per_seq > graph_width_ || !is_decode_step(batch))
    return 0;
  const int64_t n = batch.num_tokens();
  const auto it = std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), n);
  return it == graph_sizes_.end() ? 0 : *it;
}

ForwardBatch ModelRunner::pad_for_graph(const ForwardBatch& batch, int64_t p) const {
  const int64_t n = batch.num_tokens(), w = graph_width_, bw = batch.max_blocks_per_seq,
                G = batch.num_kv_groups;
  ForwardBatch g;
  g.token_ids = batch.token_ids;
  g.positions = batch.positions;
  g.seq_lens = batch.seq_lens;
  g.max_blocks_per_seq = w;
  g.num_kv_groups = G;
  g.block_tables.assign(static_cast<size_t>(G * p * w), 0);
  // Padding: one-token sequences at position 0 of block 0 (never allocated to a request)
  // that write no KV (slot -1); their rows are computed and dropped.
  g.slot_mapping.assign(static_cast<size_t>(G * p), -1);
  for (int64_t k = 0; k < G; ++k) {
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(batch.block_tables.begin() + (k * n + i) * bw, bw,
                  g.block_tables.begin() + (k * p + i) * w);
    std::copy_n(batch.slot_mapping.begin() + k * n, n, g.slot_mapping.begin() + k * p);
  }
  for (int64_t i = n; i < p; ++i) {
    g.token_ids.push_back(0);
    g.positions.push_back(0);
    g.seq_lens.push_back(1);
  }
  for (int64_t i = 0; i <= p; ++i) g.query_start_loc.push_back(i);
  for (int64_t i = 0; i < p; ++i) g.logits_indices.push_back(i);
  return g;
}

ForwardBatch ModelRunner::build_batch(const SchedulerOutput& out, const KVCacheManager& kv,
                                      StepLogits& rows) const {
  ForwardBatch b;
  const KVCacheLayout& layout = ranks_.at(0).cache->layout();
  const int64_t G = layout.num_groups(), base = layout.base_block_size();
  OCTET_CHECK(kv.num_groups() == G, "ModelRunner: the KV cache manager has ", kv.num_groups(),
              " groups, the cache ", G);
  const size_t n_req = out.scheduled.size();
  rows.sample_row.assign(n_req, -1);
  rows.prompt_row_begin.assign(n_req, -1);
  rows.prompt_pos_begin.assign(n_req, 0);
  rows.prompt_row_count.assign(n_req, 0);
  int64_t max_blocks = 0;
  for (size_t i = 0; i < n_req; ++i) {
    const Request& r = *out.scheduled[i];
    const int64_t end = r.num_computed_tokens + out.num_scheduled_tokens[i];
    max_blocks = std::max(max_blocks, (end + base - 1) / base);
  }
  b.max_blocks_per_seq = max_blocks;
  b.num_kv_groups = G;
  b.block_tables.assign(static_cast<size_t>(G * n_req * max_blocks), 0);
  b.query_start_loc.push_back(0);
  for (size_t i = 0; i < n_req; ++i) {
    const Request& r = *out.scheduled[i];
    const int64_t begin = r.num_computed_tokens, n = out.num_scheduled_tokens[i],
                  end = begin + n, row0 = b.num_tokens();
    for (int64_t p = begin; p < end; ++p) {
      b.token_ids.push_back(r.token(p));
      b.positions.push_back(p);
    }
    b.seq_lens.push_back(end);
    b.query_start_loc.push_back(b.num_tokens());
    // Prompt logprobs: the row at prompt position p predicts prompt token p + 1.
    const int64_t n_prompt = static_cast<int64_t>(r.prompt_token_ids.size());
    if (r.sampling_params.prompt_logprobs >= 0 && begin < n_prompt - 1) {
      const int64_t last = std::min(end, n_prompt - 1);  // exclusive
      rows.prompt_row_begin[i] = static_cast<int64_t>(b.logits_indices.size());
      rows.prompt_pos_begin[i] = begin;
      rows.prompt_row_count[i] = last - begin;
      for (int64_t p = begin; p < last; ++p) b.logits_indices.push_back(row0 + (p - begin));
    }
    if (end == r.num_tokens()) {
      rows.sample_row[i] = static_cast<int64_t>(b.logits_indices.size());
      b.logits_indices.push_back(row0 + n - 1);
    }
  }
  // Per group: slots of the step's tokens and the block tables, in the group's block size.
  const int64_t num_tokens = b.num_tokens();
  b.slot_mapping.reserve(static_cast<size_t>(G * num_tokens));
  for (int64_t g = 0; g < G; ++g) {
    const int64_t bs = layout.groups[static_cast<size_t>(g)].block_size;
    for (size_t i = 0; i < n_req; ++i) {
      const Request& r = *out.scheduled[i];
      const std::vector<int32_t>& blocks = kv.get_block_ids(r.request_id, g);
      const int64_t begin = r.num_computed_tokens, end = begin + out.num_scheduled_tokens[i];
      for (int64_t p = begin; p < end; ++p)
        b.slot_mapping.push_back(static_cast<int64_t>(blocks.at(p / bs)) * bs + p % bs);
      const int64_t nb = (end + bs - 1) / bs;
      std::copy_n(blocks.begin(), nb,
                  b.block_tables.begin() + (g * static_cast<int64_t>(n_req) + i) * max_blocks);
    }
  }
  return b;
}

namespace {

// Whether kSample rows are sampled on `be`: its samples_on_device() unless overridden.
bool device_sampling_on(const Backend& be) {
  const int forced = device_sampling_override();
  return forced < 0 ? be.samples_on_device() : forced == 1;
}

}  // namespace


ModelRunner::ModelRunner(const LlamaModel& model, PagedKVCache& cache,
                         int64_t max_num_batched_tokens, int64_t max_num_seqs) {
  ranks_.resize(1);
  ranks_[0].model = &model;
  ranks_[0].cache = &cache;
  device_sampling_ = device_sampling_on(model.backend());
  if (max_num_batched_tokens > 0)
    ranks_[0].act =
        model.new_activations(max_num_batched_tokens, std::max<int64_t>(max_num_seqs, 1));
}

ModelRunner::ModelRunner(const LoadedModel& loaded, int64_t num_blocks, int64_t block_size,
                         const std::vector<KVLayerSpec>& layers, int64_t max_num_batched_tokens,
                         int64_t max_num_seqs, DecodeGraphOptions graphs)
    : ModelRunner(loaded, num_blocks,
                  block_size > 0 ? single_group_layout(layers, block_size) : KVCacheLayout{},
                  layers, max_num_batched_tokens, max_num_seqs, graphs) {}

ModelRunner::ModelRunner(const LoadedModel& loaded, int64_t num_blocks,
                         const KVCacheLayout& layout, const std::vector<KVLayerSpec>& layers,
                         int64_t max_num_batched_tokens, int64_t max_num_seqs,
                         DecodeGraphOptions graphs) {
  const int64_t block_size = layout.base_block_size();
  // world: this process's ranks; the model's shards may span more (several nodes), and then
  // the rank group's communicators join them even with one local rank.
  const int world = loaded.world_size();
  const bool sharded = loaded.model->shard().world_size > 1;
  ranks_.resize(static_cast<size_t>(world));
  device_sampling_ = device_sampling_on(loaded.model->backend());
  if (sharded) group_ = loaded.ranks;
  if (graphs.enabled && graphs.max_model_len > 0 && max_num_seqs > 0 && block_size > 0 &&
      loaded.model->backend().supports_graphs()) {
    graph_sizes_ = decode_graph_sizes(max_num_seqs);
    graph_width_ = (graphs.max_model_len + block_size - 1) / block_size;  // base block size
    // Runners may share a backend (tests): each keys its graphs apart (sizes are <= 512).
    static std::atomic<int64_t> next_runner{0};
    graph_key_base_ = (next_runner++) * 1024;
  }
  const int64_t graph_max = graph_sizes_.empty() ? 0 : graph_sizes_.back();
  const auto setup = [&](int r) {
    Rank& k = ranks_[r];
    k.model = &loaded.rank_model(r);
    const TensorParallelShard& s = k.model->shard();
    k.owned_cache = std::make_unique<PagedKVCache>(
        k.model->backend(), num_blocks, s.num_kv_heads, k.model->config().head_dim,
        !sharded ? layers : shard_kv_layer_specs(layers, s.kv_head_begin, s.num_kv_heads),
        layout);
    k.cache = k.owned_cache.get();
    if (max_num_batched_tokens > 0)
      k.act = k.model->new_activations(max_num_batched_tokens,
                                       std::max<int64_t>(max_num_seqs, 1));
    if (graph_max > 0) {
      k.graph_batch.reserve(k.model->backend(), graph_max, graph_max, graph_width_,
                            k.cache->layout().num_groups());
      k.graph_act = k.model->new_activations(graph_max, graph_max);
    }
  };
  if (!group_) {
    setup(0);
  } else {
    group_->run([&](int r, Communicator&) { setup(r); });  // each rank allocates its own
  }
}

void ModelRunner::prefault_kv_cache() {
  for (Rank& k : ranks_)
    if (k.cache) k.cache->prefault();
}

ModelRunner::~ModelRunner() {
  // The graphs read this runner's buffers: drop them with it.
  for (Rank& k : ranks_)
    for (int64_t key : graph_keys_) k.model->backend().drop_graph(key);
}

void ModelRunner::plan_device_rows(const SchedulerOutput& out, const DeviceSampling& plan,
                                   int64_t num_rows, StepLogits& rows) const {
  rows.device_params.clear();
  if (ranks_[0].model->shard().world_size != 1 || num_rows == 0) return;
  const std::vector<SampleRowParams>& sampling = plan.rows;
  OCTET_CHECK(sampling.empty() || sampling.size() == out.scheduled.size(), "execute: ",
              sampling.size(), " sampling entries for ", out.scheduled.size(), " requests");
  OCTET_CHECK(static_cast<int64_t>(plan.edits.size()) <= kMaxSampleEdits, "execute: ",
              plan.edits.size(), " logit edits");
  std::vector<SampleRowParams> params(static_cast<size_t>(num_rows));  // kSkip
  bool any_sample = false, all_greedy = true;
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    if (rows.sample_row[i] < 0) continue;
    const Request& r = *out.scheduled[i];
    SampleRowParams p;
    if (!sampling.empty()) {
      p = sampling[i];
    } else if (r.sampling_params.max_tokens > 0 &&
               plain_greedy(r.sampling_params,
                            static_cast<int64_t>(r.output_token_ids.size()))) {
      p.mode = SampleRowParams::kGreedy;
    }
    OCTET_CHECK(p.edit_count >= 0 && p.edit_begin >= 0 &&
                    static_cast<size_t>(p.edit_begin) + static_cast<size_t>(p.edit_count) <=
                        plan.edits.size(),
                "execute: edits [", p.edit_begin, ", +", p.edit_count, ") of ",
                plan.edits.size());
    if (p.mode != SampleRowParams::kSkip && p.edit_count > 0 && !device_sampling_)
      p.mode = SampleRowParams::kSkip;  // argmax_rows knows no logits processing
    if (p.mode == SampleRowParams::kSample && !device_sampling_) p.mode = SampleRowParams::kSkip;
    any_sample = any_sample || p.mode == SampleRowParams::kSample;
    params[static_cast<size_t>(rows.sample_row[i])] = p;
  }
  for (const SampleRowParams& p : params)
    all_greedy = all_greedy && p.mode == SampleRowParams::kGreedy && p.edit_count == 0;
  // Greedy-only steps: argmax_rows. Rows the host must see besides: the device samples the
  // others only where it samples at all (otherwise every row comes back, as before).
  if (all_greedy || (device_sampling_ && (any_sample || !sampling.empty()))) {
    bool any_device = false;
    for (const SampleRowParams& p : params)
      any_device = any_device || p.mode != SampleRowParams::kSkip;
    if (any_device) {
      rows.device_params = std::move(params);
      rows.device_edits = plan.edits;
    }
  }
}

StepLogits ModelRunner::execute(const SchedulerOutput& out, const KVCacheManager& kv,
                                const DeviceSampling& sampling) {
  StepLogits rows;
  rows.vocab = ranks_[0].model->config().vocab_size;
  const ForwardBatch batch = build_batch(out, kv, rows);
  plan_device_rows(out, sampling, static_cast<int64_t>(batch.logits_indices.size()), rows);
  if (steps_) {  // the other nodes' ranks join this step's collectives
    std::vector<uint8_t> msg = encode_step_message(batch);
    steps_->broadcast_bytes(msg, 0);
  }
  run_batch(batch, &rows);
  return rows;
}

void ModelRunner::end_steps() {
  if (!steps_) return;
  std::vector<uint8_t> msg = encode_shutdown_message();
  steps_->broadcast_bytes(msg, 0);
}

bool ModelRunner::follow_step(HostChannel& steps) {
  std::vector<uint8_t> msg;
  steps.broadcast_bytes(msg, 0);
  ForwardBatch batch;
  if (!decode_step_message(msg, batch)) return false;
  for (int32_t id : batch.block_tables)
    if (id < 0 || id >= ranks_[0].cache->num_blocks())
      throw std::runtime_error("node 0 sent block " + std::to_string(id) + " but this node's "
                               "KV cache has " + std::to_string(ranks_[0].cache->num_blocks()) +
                               " blocks");
  run_batch(batch, nullptr);
  return true;
}

void ModelRunner::run_batch(const ForwardBatch& batch, StepLogits* rows) {
  const int64_t n = batch.num_tokens();
  const int64_t num_rows = static_cast<int64_t>(batch.logits_indices.size());
  if (const int64_t p = graph_size(batch); p > 0) {
    run_graph_step(batch, p, rows);
    return;
  }
  // The CPU rehearsal's kernel count of a decode step's forward (kernels/launch_counter.h),
  // as a graph holds it: the sampling after it (argmax_rows) not included.
  const auto* counter = dynamic_cast<const LaunchCounter*>(&ranks_[0].model->backend());
  const int64_t counted = counter != nullptr ? counter->launches() : 0;
  int64_t forward_end = counted;
  // Every rank: the same host batch on its own backend, weights, cache and activations.
  const auto run_rank = [&](int r, Communicator& comm) {
    Rank& k = ranks_[r];
    if (n > k.act.max_tokens || num_rows > k.act.max_logit_rows)
      k.act = k.model->new_activations(std::max(n, k.act.max_tokens),
                                       std::max(num_rows, k.act.max_logit_rows));
    k.device_batch.upload(k.model->backend(), batch);
    k.model->forward(batch, k.device_batch, *k.cache, k.act, comm);
    if (r == 0 && counter != nullptr) forward_end = counter->launches();
    if (r == 0 && rows) read_rows(*k.model, k.act, num_rows, *rows);
  };
  if (!group_) {
    run_rank(0, single_rank_communicator());
  } else {
    group_->run(run_rank);
  }
  if (counter != nullptr && is_decode_step(batch)) decode_step_kernels_ = forward_end - counted;
}

void ModelRunner::read_rows(const LlamaModel& model, const LlamaActivations& act,
                            int64_t num_rows, StepLogits& rows) {
  if (rows.device_params.empty()) {
    rows.logits.resize(static_cast<size_t>(num_rows * rows.vocab));
    model.read_logits(act, num_rows, rows.logits.data());
    return;
  }
  OCTET_CHECK(static_cast<int64_t>(rows.device_params.size()) == num_rows, "read_rows: ",
              rows.device_params.size(), " plans for ", num_rows, " rows");
  rows.device_ids.resize(static_cast<size_t>(num_rows));
  const bool greedy = std::all_of(rows.device_params.begin(), rows.device_params.end(),
                                  [](const SampleRowParams& p) {
                                    return p.mode == SampleRowParams::kGreedy && p.edit_count == 0;
                                  });
  if (greedy) {
    model.read_greedy(act, num_rows, rows.device_ids.data());
  } else {
    model.read_sampled(act, num_rows, rows.device_params.data(), rows.device_edits,
                       rows.device_ids.data());
  }
  // The rows the device did not sample (skipped, or a non-finite logit for the host to
  // report): their logits, one download per run of consecutive rows.
  rows.host_slot.assign(static_cast<size_t>(num_rows), -1);
  int64_t host_rows = 0;
  for (int64_t r = 0; r < num_rows; ++r)
    if (rows.device_ids[static_cast<size_t>(r)] < 0) rows.host_slot[static_cast<size_t>(r)] = host_rows++;
  rows.logits.resize(static_cast<size_t>(host_rows * rows.vocab));
  for (int64_t r = 0; r < num_rows;) {
    if (rows.host_slot[static_cast<size_t>(r)] < 0) {
      ++r;
      continue;
    }
    int64_t end = r + 1;
    while (end < num_rows && rows.host_slot[static_cast<size_t>(end)] >= 0) ++end;
    model.read_logit_rows(act, r, end - r,
                          rows.logits.data() + rows.host_slot[static_cast<size_t>(r)] * rows.vocab);
    r = end;
  }
}

void ModelRunner::run_graph_step(const ForwardBatch& batch, int64_t p, StepLogits* rows) {
  const ForwardBatch g = pad_for_graph(batch, p);
  const int64_t n = batch.num_tokens(), vocab = ranks_[0].model->config().vocab_size;
  // Tensor parallelism gathers the logits of all p rows ([ranks, p, vocab shard]): read them
  // all, keep the first n.
  const bool gathered = ranks_[0].model->shard().world_size > 1;
  std::vector<float> padded;
  const auto run_rank = [&](int r, Communicator& comm) {
    Rank& k = ranks_[r];
    Backend& be = k.model->backend();
    k.graph_batch.upload(be, g);  // reserved for the largest graph: the same addresses
    const int64_t key = graph_key_base_ + p;
    if (!be.has_graph(key)) {
      // First step of this size: eager (its logits are this step's, and it sizes the
      // backend's scratch for the capture), then recorded (nothing runs).
      k.model->forward(g, k.graph_batch, *k.cache, k.graph_act, comm);
      be.begin_capture(key);
      k.model->forward(g, k.graph_batch, *k.cache, k.graph_act, comm);
      be.end_capture();
    } else {
      PagedAttentionBatch host;
      host.num_seqs = p;
      host.max_blocks_per_seq = graph_width_;
      host.host_query_start_loc = g.query_start_loc.data();
      host.host_seq_lens = g.seq_lens.data();
      host.host_block_tables = g.block_tables.data();
      be.replay(key, host);
    }
    if (r != 0 || !rows) return;
    if (!gathered) {
      read_rows(*k.model, k.graph_act, n, *rows);
    } else {
      padded.resize(static_cast<size_t>(p * vocab));
      k.model->read_logits(k.graph_act, p, padded.data());
      rows->logits.assign(padded.begin(), padded.begin() + n * vocab);
    }
  };
  if (!group_) {
    run_rank(0, single_rank_communicator());
  } else {
    group_->run(run_rank);
  }
  const int64_t key = graph_key_base_ + p;
  if (std::find(graph_keys_.begin(), graph_keys_.end(), key) == graph_keys_.end())
    graph_keys_.push_back(key);
  decode_step_kernels_ = ranks_[0].model->backend().graph_kernel_count(key);
  ++graph_steps_;
}

// ---- the per-step message (multi-node) ----

namespace {

constexpr uint8_t kStepKind = 1, kShutdownKind = 0;

template <class T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

template <class T>
void put_array(std::vector<uint8_t>& out, const std::vector<T>& a) {
  put(out, static_cast<int64_t>(a.size()));
  const auto* p = reinterpret_cast<const uint8_t*>(a.data());
  out.insert(out.end(), p, p + a.size() * sizeof(T));
}

struct Reader {
  const std::vector<uint8_t>& bytes;
  size_t at = 0;
  void need(size_t n) {
    if (bytes.size() - at < n)
      throw std::runtime_error("step message from node 0 is truncated (" +
                               std::to_string(bytes.size()) + " bytes)");
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  template <class T>
  void get_array(std::vector<T>& a) {
    const auto n = get<int64_t>();
    if (n < 0 || static_cast<uint64_t>(n) > (bytes.size() - at) / sizeof(T))
      throw std::runtime_error("step message from node 0 has a bad array length " +
                               std::to_string(n));
    a.resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(a.data(), bytes.data() + at, static_cast<size_t>(n) * sizeof(T));
    at += static_cast<size_t>(n) * sizeof(T);
  }
};

}  // namespace

std::vector<uint8_t> encode_step_message(const ForwardBatch& b) {
  std::vector<uint8_t> out;
  put(out, kStepKind);
  put(out, b.max_blocks_per_seq);
  put(out, b.num_kv_groups);
  put_array(out, b.token_ids);
  put_array(out, b.positions);
  put_array(out, b.slot_mapping);
  put_array(out, b.query_start_loc);
  put_array(out, b.seq_lens);
  put_array(out, b.block_tables);
  put_array(out, b.logits_indices);
  return out;
}

std::vector<uint8_t> encode_shutdown_message() { return {kShutdownKind}; }

bool decode_step_message(const std::vector<uint8_t>& bytes, ForwardBatch& b) {
  Reader in{bytes};
  const auto kind = in.get<uint8_t>();
  if (kind == kShutdownKind && bytes.size() == 1) return false;
  if (kind != kStepKind)
    throw std::runtime_error("step message from node 0 has unknown kind " +
                             std::to_string(kind));
  b = ForwardBatch{};
  b.max_blocks_per_seq = in.get<int64_t>();
  b.num_kv_groups = in.get<int64_t>();
  in.get_array(b.token_ids);
  in.get_array(b.positions);
  in.get_array(b.slot_mapping);
  in.get_array(b.query_start_loc);
  in.get_array(b.seq_lens);
  in.get_array(b.block_tables);
  in.get_array(b.logits_indices);
  const int64_t seqs = b.num_seqs(), tokens = b.num_tokens();
  if (in.at != bytes.size() || b.max_blocks_per_seq < 0 || b.num_kv_groups < 1 ||
      b.num_kv_groups > (int64_t{1} << 16) ||
      static_cast<int64_t>(b.positions.size()) != tokens ||
      static_cast<int64_t>(b.slot_mapping.size()) != b.num_kv_groups * tokens ||
      static_cast<int64_t>(b.query_start_loc.size()) != seqs + 1 ||
      static_cast<int64_t>(b.block_tables.size()) != b.num_kv_groups * seqs * b.max_blocks_per_seq)
    throw std::runtime_error("step message from node 0 is malformed (array sizes disagree)");
  return true;
}

}  // namespace octet
