// Paged KV cache kernels of the CUDA backend (attention.cu: write_kv_cache and the plan;
// attention_decode.cu, attention_prefill.cu: the kernels): reshape-and-cache (write_kv_cache)
// and causal paged attention (Kwon et al. 2023) with FP32 scores, softmax state and P.V sums.
// Device pointers throughout, semantics of kernels/backend.h. Attention runs two kernels, chosen
// per sequence from its own query count (so a query's result depends on its sequence only):
//  - decode ("paged_decode_split", < kPrefillMinQueries queries): one block per (query, head,
//    partition of kPartitionTokens absolute positions); a row with several partitions writes
//    partial softmax states that "paged_decode_merge" folds in partition order (flash-decoding);
//  - prefill ("paged_prefill_tiled"): one block per (tile of kTileRows queries of a sequence,
//    head), K/V staged through shared memory kKvTile positions at a time, online softmax per
//    query (flash-attention style).
// head_dim <= kMaxHeadDim. The host plans the work from the batch's query_start_loc and seq_lens
// (host copies given by the caller, or read back by CudaBackend with one small device-to-host
// copy that waits for the queued work) and uploads the plan through a ring of kPlanSlots pinned
// buffers: a call waits only for the upload kPlanSlots calls back, not for the queued kernels.
// The decode kernels launch a capped grid (at most kGridItemsPerSm x SMs blocks in x) whose
// blocks loop over the work items, eager and in graphs alike; each item's arithmetic does not
// depend on which block runs it, so the bits do not either.
// Workspace: one partials buffer (and one eager plan buffer) per PagedAttention, shared by the
// eager calls and every captured graph (they run one at a time on the stream). reserve() sizes
// them once (attention_workspace); after it nothing grows: an eager call whose partial states or
// plan exceed them runs in chunks of whole query rows that fit (the same items, so the same bits).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/views.h"

namespace octet::cuda_kernels {

inline constexpr int64_t kMaxHeadDim = 256;
inline constexpr int64_t kPartitionTokens = 512;
inline constexpr int64_t kPrefillMinQueries = 8;
inline constexpr int64_t kTileRows = 16;
inline constexpr int64_t kKvTile = 32;
inline constexpr int kPlanSlots = 8;
inline constexpr int64_t kGridItemsPerSm = 4;  // decode / merge grid.x cap, per SM
/// Partial-softmax slots an eager reservation holds at most (attention_workspace): more
/// decode partitions in one call run in chunks.
inline constexpr int64_t kEagerPartialSlots = 8192;

/// The attention workspace PagedAttention::reserve takes for a rank's limits: the eager plan
/// (bytes: decode, merge and prefill items of the worst batch, or FlashInfer's plan of every
/// row and one sequence's pages), the partial softmax states (floats) of the larger of an
/// eager call (min(worst batch, kEagerPartialSlots) slots, at least one row's partitions) and
/// the largest graph (every sequence at full capacity), and FlashInfer prefill's 16-bit q and
/// output (bytes, 2 x 2 x max_tokens x heads x head_dim).
/// max_tokens / max_seqs: one step's limits; max_graph_seqs 0: no graphs.
struct AttentionWorkspace {
  int64_t plan_bytes = 0;
  int64_t partial_floats = 0;
  int64_t prefill_bytes = 0;
};
AttentionWorkspace attention_workspace(int64_t max_tokens, int64_t max_seqs,
                                       int64_t max_model_len, int64_t block_size,
                                       int64_t num_heads, int64_t head_dim,
                                       int64_t max_graph_seqs);

/// Backend::rope_write_kv's arguments: q [n, q_heads, head_dim], k and v [n, kv heads,
/// head_dim] (the cache's heads and head_dim), positions [n], inv_freq [rot_dim / 2], slots [n].
struct RopeWriteKv {
  float* q = nullptr;
  int64_t q_heads = 0;
  float* k = nullptr;
  const float* v = nullptr;
  int64_t n = 0;
  int64_t rot_dim = 0;
  const int64_t* positions = nullptr;
  const float* inv_freq = nullptr;
  RopeLayout layout = RopeLayout::HalfSplit;
  const int64_t* slots = nullptr;
};

/// Queues RoPE of q and k with the rotated k and v stored to `cache` as write_kv_cache stores
/// them, in one kernel (the bits of rope then write_kv_cache).
void rope_write_kv(const RopeWriteKv& args, const KVCacheView& cache, cudaStream_t stream);

/// Queues write_kv_cache (backend.h). FP8 caches need k_scale / v_scale.
void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t n, cudaStream_t stream);

/// The attention plans of one captured CUDA graph (CudaBackend::begin_capture .. end_capture):
/// one per distinct sliding window among its paged_attention calls (the plan depends only on
/// the batch and the window), each in device memory at the address the graph's kernels read:
///   [0] decode items this replay, [1] merge items, then max_decode decode items
///   (kDecodeItemInts each), then max_merge merge items (kMergeItemInts each).
/// The plans hold room for every sequence at the block table's full capacity; the graph's
/// capped grids loop over this replay's counts, which prepare_replay writes with the plans
/// before each launch. The items are those an eager call makes for the same batch, so replay
/// output equals eager output bit for bit.
struct GraphAttention {
  struct Plan {
    int64_t window = 0;
    int64_t num_seqs = 0;
    int64_t max_blocks_per_seq = 0;
    int64_t block_size = 0;
    int64_t max_decode = 0;
    int64_t max_merge = 0;
    int32_t* device = nullptr;  // cudaMalloc'd, layout above
    size_t pinned_offset = 0;   // ints into `pinned`
    // FlashInfer decode (attention_flashinfer.cu) instead of octet's items: the plan's layout
    // is attention_flashinfer.cu's, for fi_items work items at most.
    bool flashinfer = false;
    int64_t fi_items = 0;
  };
  std::vector<Plan> plans;
  std::vector<std::shared_ptr<void>> partials;  // partials buffers its kernels use (kept alive)
  int32_t* pinned = nullptr;                    // host staging of every plan, made at 1st replay
  size_t pinned_ints = 0;
  cudaEvent_t copied = nullptr;                 // after the last replay's plan uploads
  GraphAttention() = default;
  GraphAttention(const GraphAttention&) = delete;
  GraphAttention& operator=(const GraphAttention&) = delete;
  ~GraphAttention();
};

struct HostPlan;  // one call's (or chunk's) work items (attention.cu)

/// Plans and queues paged attention; owns the device work lists and partial-softmax scratch
/// and the pinned host copy of the plan. One per backend (one stream).
class PagedAttention {
 public:
  PagedAttention();
  ~PagedAttention();
  PagedAttention(const PagedAttention&) = delete;
  PagedAttention& operator=(const PagedAttention&) = delete;

  /// host_query_start_loc: [batch.num_seqs + 1], host_seq_lens: [batch.num_seqs], host copies of
  /// the batch's arrays (validated here: a broken batch is an OCTET_CHECK abort).
  void run(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
           const int64_t* host_query_start_loc, const int64_t* host_seq_lens, int64_t num_heads,
           int64_t sliding_window, float softmax_scale, float* out, cudaStream_t stream);

  /// Frees the plan and partials buffers grown so far and allocates exactly `w` (after the
  /// queued work); from then on nothing grows (eager calls run in chunks that fit) and a
  /// capture needing more partials than w holds is an OCTET_CHECK abort. Graphs captured
  /// before keep their buffers. Throws std::bad_alloc when the device lacks the memory.
  void reserve(const AttentionWorkspace& w, cudaStream_t stream);
  /// Whether reserve() was called.
  bool reserved() const { return reserved_; }
  /// Whether FlashInfer's kernels run here (flashinfer_decode_available() at construction).
  bool flashinfer() const { return flashinfer_; }
  /// The kernels that run, for the start-up log.
  std::string describe() const;

  /// Starts recording a graph's calls (capture() until end_capture()).
  void begin_capture();
  /// During a stream capture: queues the decode kernels of a call whose sequences have one
  /// query each (a decode step), sized for every sequence at the block table's capacity and
  /// reading the plan of this window that prepare_replay writes. b's host fields, when given,
  /// are checked to be such a batch. No host synchronisation.
  void capture(const KVCacheView& cache, const float* q, const PagedAttentionBatch& b,
               int64_t num_heads, int64_t sliding_window, float softmax_scale, float* out,
               cudaStream_t stream);
  /// The plans recorded since begin_capture().
  std::shared_ptr<GraphAttention> end_capture();
  /// Queues on `stream` the upload of every plan of g for batch b (host_query_start_loc and
  /// host_seq_lens required; num_seqs and max_blocks_per_seq as captured; one query per
  /// sequence): call it right before launching g's graph on the same stream.
  static void prepare_replay(GraphAttention& g, const PagedAttentionBatch& b,
                             cudaStream_t stream);

 private:
  void reserve_device(size_t work_bytes, size_t partial_floats, cudaStream_t stream);
  // Whether this call's decode rows run on FlashInfer (flashinfer_decode.h: the device runs
  // it, the cache type / head_dim / group size have kernels), and its prefill rows
  // (flashinfer_prefill.h; it also needs the host block table).
  bool uses_flashinfer(const KVCacheView& cache, const PagedAttentionBatch& b,
                       int64_t num_heads) const;
  bool uses_flashinfer_prefill(const KVCacheView& cache, const PagedAttentionBatch& b) const;
  // Eager FlashInfer decode of the batch's decode rows, in chunks of rows that fit the plan
  // and partials buffers (the same items whatever the chunking).
  void run_flashinfer(const KVCacheView& cache, const float* q, const PagedAttentionBatch& b,
                      const int64_t* qsl, const int64_t* lens, int64_t num_heads, int64_t window,
                      float softmax_scale, float* out, cudaStream_t stream);
  // Eager FlashInfer prefill of the batch's prefill rows, in chunks of whole sequences.
  void run_flashinfer_prefill(const KVCacheView& cache, const float* q,
                              const PagedAttentionBatch& b, const int64_t* qsl,
                              const int64_t* lens, int64_t num_heads, int64_t window,
                              float softmax_scale, float* out, cudaStream_t stream);
  // Captures the FlashInfer decode kernels of a graph plan (capture()).
  void capture_flashinfer(GraphAttention& g, GraphAttention::Plan& plan, const KVCacheView& cache,
                          const float* q, const PagedAttentionBatch& b, int64_t num_heads,
                          float softmax_scale, float* out, cudaStream_t stream);
  static void prepare_replay_flashinfer(GraphAttention& g, GraphAttention::Plan& p,
                                        const PagedAttentionBatch& b, cudaStream_t stream);
  // The device's SMs (FlashInfer decode sizes its grid from them).
  int64_t sm_count() const { return std::max<int64_t>(1, grid_cap_ / kGridItemsPerSm); }
  // Queues one chunk of an eager call (plan: its items, slots counted from 0).
  void run_chunk(const HostPlan& plan, const KVCacheView& cache, const float* q,
                 const PagedAttentionBatch& b, int64_t num_heads, int64_t window,
                 float softmax_scale, float* out, cudaStream_t stream);

  // Pinned host staging of the plans, used in turn; each slot's event is recorded after its
  // upload, so the slot is reusable once that event has completed.
  struct PlanSlot {
    int32_t* pinned = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;
  };
  // The next pinned plan slot, at least `bytes` large, free to fill (its last upload done).
  PlanSlot& next_plan_slot(size_t bytes);
  PlanSlot slots_[kPlanSlots];
  int next_slot_ = 0;
  void* work_ = nullptr;          // device copy of the eager plan
  size_t work_bytes_ = 0;
  // [slots, heads, head_dim + 2]: acc, then m and l. One buffer for eager calls and graphs;
  // before reserve() a call needing more replaces it (graphs keep the one they captured).
  std::shared_ptr<void> partials_;
  size_t partial_floats_ = 0;
  // FlashInfer prefill's 16-bit q, then its 16-bit output (half_bytes_ / 2 each).
  std::shared_ptr<void> half_;
  size_t half_bytes_ = 0;
  bool reserved_ = false;
  int64_t grid_cap_ = 1;          // decode / merge grid.x: kGridItemsPerSm x SMs
  bool flashinfer_ = false;       // flashinfer_decode_available() at construction
  std::shared_ptr<GraphAttention> capturing_;  // the capture in progress
};

}  // namespace octet::cuda_kernels
