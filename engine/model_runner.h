#pragma once
// ModelRunner: turns a SchedulerOutput into a ForwardBatch (token ids, positions, KV slots,
// block tables, which rows need logits), runs the model over the paged KV cache and hands back
// the logits rows each request needs (DESIGN.md "One request's path"). With tensor parallelism
// every rank (LoadedModel::ranks) runs the same host batch, uploaded to its own backend, over its
// own weight shard, KV cache (its KV heads; the same blocks and block tables for every rank) and
// activations; the logits come back whole from rank 0.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/sampler.h"
#include "engine/scheduler_output.h"
#include "kernels/rank_group.h"
#include "models/forward_batch.h"
#include "models/llama.h"
#include "models/paged_kv_cache.h"

namespace octet {

class KVCacheManager;
struct LoadedModel;

/// Logits rows of one step, per scheduled request (same order as SchedulerOutput::scheduled).
struct StepLogits {
  int64_t vocab = 0;
  // Tokens taken on the device (world size 1): execute()'s per-row plan, [num_rows] (empty:
  // every row's logits come back), and what came back, [num_rows]: a token (the one the host
  // sampler would take), or < 0 (kSampleSkipped, kSampleNonFinite) for a row whose logits were
  // read instead. Greedy-only steps take Backend::argmax_rows, others Backend::sample_rows:
  // rows x 4 bytes cross instead of rows x vocab x 4 for every row the device sampled.
  std::vector<SampleRowParams> device_params;
  std::vector<LogitEdit> device_edits;  // the rows' logits processing (DeviceSampling::edits)
  std::vector<int32_t> device_ids;
  // The logits rows read: [host rows, vocab]; row r at host_slot[r] (-1: not read), or at r
  // when host_slot is empty (every row read).
  std::vector<float> logits;
  std::vector<int64_t> host_slot;       // [num_rows] or empty
  std::vector<int64_t> sample_row;      // [num_scheduled]: row to sample from, or -1
  // Prompt logprobs: rows for prompt positions p (predicting token p + 1), per request.
  std::vector<int64_t> prompt_row_begin;  // [num_scheduled]: first row, or -1
  std::vector<int64_t> prompt_pos_begin;  // [num_scheduled]: position p of that first row
  std::vector<int64_t> prompt_row_count;  // [num_scheduled]
  const float* row(int64_t r) const {
    return logits.data() + (host_slot.empty() ? r : host_slot[static_cast<size_t>(r)]) * vocab;
  }
  /// The device's token for row r, or < 0 (the row's logits are in `logits`).
  int32_t device_id(int64_t r) const {
    return device_ids.empty() ? kSampleSkipped : device_ids[static_cast<size_t>(r)];
  }
};

/// CUDA graphs for decode steps (vLLM's CUDA graph capture; --enforce-eager turns them off):
/// a step whose requests all decode one token, on a backend that supports graphs, runs as the
/// graph of the next size of decode_graph_sizes() (captured the first time, padded with
/// one-token dummy sequences that write no KV), and its logits equal the eager step's bit for
/// bit (every op is batch invariant). Other steps, and larger batches, run eagerly.
struct DecodeGraphOptions {
  bool enabled = false;
  /// The longest sequence: graph batches' block tables are ceil(max_model_len / block_size)
  /// wide (fixed, as the graph reads them in place). 0: no graphs.
  int64_t max_model_len = 0;
};

/// vLLM's capture sizes up to max_num_seqs (at most 512): 1, 2, 4, then multiples of 8.
std::vector<int64_t> decode_graph_sizes(int64_t max_num_seqs);

/// Owns the per-rank activations and persistent batch buffers (and, built from a LoadedModel,
/// the per-rank KV caches); shares the model's backends and rank group. Each step uploads the
/// ForwardBatch to every rank and downloads the logits rows from rank 0.
class ModelRunner {
 public:
  /// One rank over `cache` (made by the caller on model.backend()). Preallocates activations for
  /// max_num_batched_tokens tokens and max_num_seqs logits rows (0: sized by the first batches;
  /// a larger batch grows them, never shrinks).
  ModelRunner(const LlamaModel& model, PagedKVCache& cache, int64_t max_num_batched_tokens = 0,
              int64_t max_num_seqs = 0);

  /// Every rank of `loaded` (world size 1 included), each with its own PagedKVCache of
  /// num_blocks blocks of block_size tokens holding its KV heads, `layers` sliced to them
  /// (shard_kv_layer_specs). Throws std::invalid_argument for bad cache sizes.
  ModelRunner(const LoadedModel& loaded, int64_t num_blocks, int64_t block_size,
              const std::vector<KVLayerSpec>& layers, int64_t max_num_batched_tokens,
              int64_t max_num_seqs, DecodeGraphOptions graphs = {});
  /// The same with the caches laid out by `layout` (KV cache groups; the KVCacheManager must
  /// have the same groups).
  ModelRunner(const LoadedModel& loaded, int64_t num_blocks, const KVCacheLayout& layout,
              const std::vector<KVLayerSpec>& layers, int64_t max_num_batched_tokens,
              int64_t max_num_seqs, DecodeGraphOptions graphs = {});

  ~ModelRunner();

  /// Every rank's PagedKVCache::prefault(); call before the first step.
  void prefault_kv_cache();

  /// Builds the batch for `out` (block ids from `kv`) and runs the forward pass. A request is
  /// sampled when its scheduled tokens reach its last token; prompt-logprob rows are added for
  /// requests that asked for them. `sampling`: per scheduled request, how the backend may
  /// sample it (OutputProcessor::device_sampling); empty: plain greedy requests on the device
  /// when every row is one (sampler.h plain_greedy), nothing else. kSample rows are sampled on
  /// the backend only where it samples_on_device() (or OCTET_DEVICE_SAMPLING=1), at world size 1.
  StepLogits execute(const SchedulerOutput& out, const KVCacheManager& kv,
                     const DeviceSampling& sampling = {});

  /// Multi-node, node 0: execute() sends each step's batch over `steps` (its root) to the
  /// other nodes before running its own ranks; end_steps() tells them to stop. Null: none.
  /// The channel must outlive the runner's use of it.
  void broadcast_steps(HostChannel* steps) { steps_ = steps; }
  /// Multi-node, node 0: sends the followers the shutdown message (no-op without a channel).
  void end_steps();
  /// Multi-node, nodes > 0: receives one message from node 0 over `steps`; a step runs on
  /// this node's ranks through the same code as execute() (graph or eager chosen from the
  /// batch as node 0 chose it; no logits are read). Returns false on node 0's shutdown
  /// message. Throws std::runtime_error when node 0 is lost, or a peer during the step.
  bool follow_step(HostChannel& steps);

  /// The batch execute() would run (for tests).
  ForwardBatch build_batch(const SchedulerOutput& out, const KVCacheManager& kv,
                           StepLogits& rows) const;

  int world_size() const { return static_cast<int>(ranks_.size()); }
  /// Rank r's KV cache.
  const PagedKVCache& cache(int r) const { return *ranks_.at(r).cache; }
  /// Steps run as a graph so far (captures included), for tests and logs.
  int64_t graph_steps() const { return graph_steps_; }
  /// Kernels of the last decode step's forward (every sequence one token, its logits only) on
  /// rank 0: a graph step's kernel nodes (Backend::graph_kernel_count), or, eager on a
  /// LaunchCounter backend (kernels/launch_counter.h, the CPU rehearsal), what it counted over
  /// the forward; the sampling after it (argmax_rows: one kernel) is not included. -1 until
  /// such a step. Read from another thread after the step.
  int64_t decode_step_kernels() const { return decode_step_kernels_.load(); }

 private:
  // rows.device_params for this step (StepLogits), from `sampling` as execute() says.
  void plan_device_rows(const SchedulerOutput& out, const DeviceSampling& sampling,
                        int64_t num_rows, StepLogits& rows) const;
  // Rank 0's rows of the last forward (act) into rows: device tokens and logits (StepLogits).
  static void read_rows(const LlamaModel& model, const LlamaActivations& act, int64_t num_rows,
                        StepLogits& rows);
  // Whether `batch` is a decode step: every sequence one token, and only its logits.
  static bool is_decode_step(const ForwardBatch& batch);
  // Runs `batch` on every rank; rows (node 0) gets the logits, null: none are read.
  void run_batch(const ForwardBatch& batch, StepLogits* rows);
  // The graph size for `batch` (a decode step of n one-token sequences), or 0 (eager).
  int64_t graph_size(const ForwardBatch& batch) const;
  // `batch` padded to p sequences with block tables graph_width_ wide.
  ForwardBatch pad_for_graph(const ForwardBatch& batch, int64_t p) const;
  // Runs `batch` as graph p (capturing it first), the logits into rows->logits (null: none).
  void run_graph_step(const ForwardBatch& batch, int64_t p, StepLogits* rows);

  struct Rank {
    const LlamaModel* model = nullptr;
    PagedKVCache* cache = nullptr;
    std::unique_ptr<PagedKVCache> owned_cache;
    LlamaActivations act;
    ForwardBatchBuffers device_batch;
    // Graph steps' own batch arrays and activations, sized once for the largest graph: the
    // graphs read them in place, so eager steps (which may regrow theirs) never touch them.
    ForwardBatchBuffers graph_batch;
    LlamaActivations graph_act;
  };
  std::vector<Rank> ranks_;
  std::shared_ptr<RankGroup> group_;  // null for an unsharded model
  std::vector<int64_t> graph_sizes_;  // ascending; empty: no graphs
  int64_t graph_key_base_ = 0;        // this runner's graph keys: base + size (unique per runner)
  std::vector<int64_t> graph_keys_;   // captured on every rank's backend
  std::atomic<int64_t> decode_step_kernels_{-1};
  int64_t graph_width_ = 0;           // blocks per sequence in graph batches
  int64_t graph_steps_ = 0;
  HostChannel* steps_ = nullptr;  // node 0 of a multi-node run
  bool device_sampling_ = false;  // kSample rows on the backend (samples_on_device)
};

/// A ForwardBatch as bytes for the per-step broadcast (host byte order: every node runs the
/// same build), and back. Message: kind u8 (1 step, 0 shutdown), then for a step
/// max_blocks_per_seq i64 and each array as i64 length + elements. decode_step_message
/// throws std::runtime_error for a truncated or malformed message; returns false for shutdown.
std::vector<uint8_t> encode_step_message(const ForwardBatch& batch);
std::vector<uint8_t> encode_shutdown_message();
bool decode_step_message(const std::vector<uint8_t>& bytes, ForwardBatch& batch);

}  // namespace octet
