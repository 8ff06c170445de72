#pragma once
// The Llama-family decoder (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM):
//   x = embed(tokens)
//   per layer: h = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = rms(x)
//              x = h + down(silu(gate(rms(h))) * up(rms(h)))
//   logits = lm_head(rms(x))          (lm_head = embed when tie_word_embeddings)
// Mistral and Qwen2 differ only in what the config sets: per-layer sliding windows
// (ModelConfig::layer_sliding_window) and, for Qwen2, q/k/v biases (LinearWeight::bias).
// Qwen3 adds per-head q/k RMSNorm before RoPE (ModelConfig::qk_norm). Gemma 3 adds those and
// (ModelConfig's switches): x = embed * sqrt(hidden); h = x + post_attn_norm(attn(...));
// x = h + post_ffn_norm(down(gelu_tanh(gate(n)) * up(n))), n = pre_ffn_norm(h); its own RoPE
// base for sliding layers and attention scale query_pre_attn_scalar^-0.5.
// Source: Touvron et al. 2023 (LLaMA), HF transformers modeling_{llama,mistral,qwen2,qwen3,
// gemma3}.py, llama.cpp's gemma3 graph.
// Linear layers run in FP32 (quantization "none", the reference that goldens check) or FP8 W8A8
// (models/linear.h); norms, RoPE, attention and the residual stream are FP32 throughout.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/rank_group.h"
#include "models/forward_batch.h"
#include "models/linear.h"
#include "models/model_config.h"
#include "models/paged_kv_cache.h"
#include "models/quant_config.h"
#include "models/tensor_parallel.h"

namespace octet {

class GGUFFile;
class HFCheckpoint;
class WeightSource;

/// How to load weights. quantization: "auto" (use the checkpoint's FP8 weights when it has
/// them, else quantize online to FP8), "fp8" (same as auto), "none" (FP32 everything; an FP8
/// checkpoint's weights are dequantized, w * scale). weight_granularity applies to online
/// quantization (per output channel by default, or one scale per tensor).
struct LoadOptions {
  std::string quantization = "auto";
  ScaleGranularity weight_granularity = ScaleGranularity::PerRow;
  /// The backend the weights go to; null: make_backend(device).
  std::shared_ptr<Backend> backend;
  /// --device (cpu, cuda, cuda:N, auto), used when backend is null.
  std::string device = "auto";
  /// Tensor parallelism: this model's rank and the number of ranks; the weights loaded are
  /// that rank's shard (models/tensor_parallel.h). Throws std::invalid_argument (at load) when
  /// the head counts or intermediate size do not divide (validate_tensor_parallel).
  int rank = 0;
  int world_size = 1;
  /// lm_head format on the FP8 path when the checkpoint leaves it unquantized: "bf16", or "fp8"
  /// (per-channel E4M3, dynamic per-token activations, like the other linears).
  std::string lm_head_dtype = "bf16";
  /// Multi-node start (--nnodes > 1): this node and the NCCL id exchange (rank_group.h).
  RankPlacement placement;
};

struct LlamaLayerWeights {
  Buffer attn_norm;       // [hidden] FP32
  LinearWeight q_proj;    // [num_heads*head_dim, hidden]
  LinearWeight k_proj;    // [num_kv_heads*head_dim, hidden]
  LinearWeight v_proj;    // [num_kv_heads*head_dim, hidden]
  LinearWeight o_proj;    // [hidden, num_heads*head_dim]
  Buffer ffn_norm;        // [hidden] FP32
  LinearWeight gate_proj; // [intermediate, hidden]
  LinearWeight up_proj;   // [intermediate, hidden]
  LinearWeight down_proj; // [hidden, intermediate]
  Buffer q_norm, k_norm;  // [head_dim] FP32 (qk_norm; else empty)
  Buffer post_attn_norm;  // [hidden] FP32 (sandwich_norms; else empty)
  Buffer post_ffn_norm;   // [hidden] FP32 (sandwich_norms; else empty)
};

/// The model's weights, buffers of the model's Backend.
struct LlamaWeights {
  Buffer embed_tokens;  // [vocab, hidden] FP32 (rows are looked up)
  Buffer norm;          // [hidden] FP32
  LinearWeight lm_head; // [vocab, hidden]: FP32 unquantized, else BF16 or FP8
  std::vector<LlamaLayerWeights> layers;
};

/// Preallocated activations of run_decoder for up to max_tokens tokens and max_logit_rows
/// logits rows (buffers of the model's Backend, owned by the caller: the model runner). Widths
/// are this rank's shard's (q, k, v, attn, gate, up, logits); x, xn, proj are full hidden.
struct LlamaActivations {
  int64_t max_tokens = 0;
  int64_t max_logit_rows = 0;
  Buffer x, xn, q, k, v, attn, proj, gate, up;  // [max_tokens, width] FP32
  Buffer qn, kn;                                // [max_tokens, q / kv width] FP32 (qk_norm)
  Buffer post;                                  // [max_tokens, hidden] FP32 (sandwich_norms)
  Buffer qa;                                    // [max_tokens, max(in)] E4M3
  Buffer a_scale;                               // [max_tokens] FP32
  // FP8 row-parallel k parts (world > 1 on a backend with exact_k_parts(); else empty):
  Buffer amax;               // [max_tokens] FP32
  Buffer partials;           // [G / world, max_tokens, hidden] FP32
  Buffer gathered_partials;  // [G, max_tokens, hidden] FP32
  // Row-parallel outputs in BF16 for the all-reduce (world > 1 without exact_k_parts(); else
  // empty):
  Buffer reduce_bf16;        // [max_tokens, hidden] BF16 bits
  Buffer last;                                  // [max_logit_rows, hidden] FP32
  Buffer logits;                                // [max_logit_rows, vocab_shard_size] FP32
  Buffer sampled;                               // [max_logit_rows] int32 (read_greedy)
  Buffer sample_params;                         // [max_logit_rows] SampleRowParams
  Buffer sample_edits;                          // [kMaxSampleEdits] LogitEdit
  Buffer gathered;  // [world, max_logit_rows, vocab_shard_size] FP32 (world > 1)
};

/// K/V of one sequence in FP32 on the host, k, v: [num_layers, max_tokens, num_kv_heads,
/// head_dim] (what calculate_kv_scales reads).
struct DenseKVCache {
  int64_t max_tokens = 0;
  std::vector<float> k;
  std::vector<float> v;
};

/// A one-sequence FP32 paged cache (blocks 0, 1, ... in order) for the one-sequence forward
/// (perplexity, KV-scale calibration, tests). Its slots are the positions.
struct SequenceKVCache {
  int64_t max_tokens = 0;
  PagedKVCache cache;
  LlamaActivations act;        // reused by every forward on this cache (grown when needed)
  ForwardBatchBuffers device;  // the batch arrays, reused likewise
  /// The cached K/V of positions [0, max_tokens), downloaded.
  DenseKVCache download() const;
};

class LlamaModel {
 public:
  /// Loads config and weights from a GGUF file (dequantized to FP32, then quantized per
  /// `options`; biases stay FP32). Throws ModelFileError naming the file for an unsupported
  /// architecture, a missing tensor (a layer's bias included when the config has biases), a
  /// tensor whose shape does not match the config, or an unsupported type.
  static LlamaModel load(const GGUFFile& file, const LoadOptions& options = {});
  /// Loads a Hugging Face checkpoint (config.json + safetensors), FP8 or not. Additionally
  /// throws ModelFileError for a malformed quantization_config or quantized tensors
  /// (missing/ill-shaped/non-finite scales).
  static LlamaModel load(const HFCheckpoint& checkpoint, const LoadOptions& options = {});
  /// Builds the model from any WeightSource with `config` and `quant` as given, by the same
  /// path as the loaders above (dummy weights: models/dummy_weights.h, which defines it).
  static LlamaModel load(const WeightSource& source, ModelConfig config, QuantConfig quant,
                         const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const QuantConfig& quant_config() const { return quant_; }
  RopeLayout rope_layout() const { return rope_layout_; }
  const LlamaWeights& weights() const { return weights_; }
  /// "fp8-w8a8-dynamic", "fp8-w8a8-static", "fp32", ... for logs and benchmarks.
  std::string linear_format() const;
  /// Bytes of weights read per decode step (every linear + lm_head; embedding rows excluded),
  /// this rank's shard.
  int64_t decode_weight_bytes() const;
  /// This model's tensor-parallel shard (world size 1: the whole model).
  const TensorParallelShard& shard() const { return shard_; }

  /// The backend holding the weights (shared with caches and runners made for this model).
  Backend& backend() const { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const { return backend_; }

  /// Activations for up to max_tokens tokens and max_logit_rows logits rows per forward.
  LlamaActivations new_activations(int64_t max_tokens, int64_t max_logit_rows) const;

  /// A zeroed one-sequence FP32 cache for up to max_tokens positions (this rank's KV heads);
  /// hadamard_rotation: its layers rotate q and k (KVLayerSpec::hadamard_rotation).
  SequenceKVCache new_cache(int64_t max_tokens, bool hadamard_rotation = false) const;

  /// Runs n tokens of one sequence at positions start_pos..start_pos+n-1 (causal; earlier
  /// positions must be in `cache`) as a one-sequence batch through the paged forward, writes
  /// their K/V to `cache`, and returns logits [n, vocab] when all_logits, else [1, vocab] for
  /// the last token. Throws std::invalid_argument for a token id outside [0, vocab) or when
  /// start_pos + n exceeds cache.max_tokens. Tensor parallelism: every rank calls it with its
  /// own cache and `comm`; rank 0 gets the logits, the others an empty vector.
  std::vector<float> forward(const int32_t* tokens, int64_t n, int64_t start_pos,
                             SequenceKVCache& cache, bool all_logits,
                             Communicator& comm = single_rank_communicator()) const;

  /// One engine step over the paged KV cache (models/llama_paged.cpp), the one device entry
  /// point: runs batch.token_ids at batch.positions, writes their K/V to batch.slot_mapping in
  /// `cache` (in each layer's dtype and scales), attends over the block tables with each
  /// layer's sliding window, and leaves logits [batch.logits_indices.size(), vocab] (FP32) in
  /// act.logits. `device` holds batch's arrays uploaded (ForwardBatchBuffers::upload); act must
  /// fit the batch. Batch-invariant: a token's logits depend only on its own sequence. Throws
  /// std::invalid_argument for token ids outside the vocabulary or inconsistent batch arrays.
  /// Tensor parallelism: every rank runs it on the same batch with its own cache, activations
  /// and `comm`; the logits are then whole on every rank (read_logits).
  void forward(const ForwardBatch& batch, const ForwardBatchBuffers& device, PagedKVCache& cache,
               LlamaActivations& act, Communicator& comm = single_rank_communicator()) const;

  /// Copies the first `rows` logits rows [rows, vocab] of the last forward into host `out`
  /// (world > 1: assembled from the gathered vocabulary shards).
  void read_logits(const LlamaActivations& act, int64_t rows, float* out) const;
  /// Logits rows [first, first + rows) of the last forward into host `out` [rows, vocab].
  /// World size 1 only (OCTET_CHECK).
  void read_logit_rows(const LlamaActivations& act, int64_t first, int64_t rows,
                       float* out) const;
  /// The greedy token of each of the first `rows` logits rows of the last forward, taken on the
  /// backend (Backend::argmax_rows: -1 for a row with a non-finite logit) into host `ids`:
  /// rows x 4 bytes cross instead of rows x vocab x 4. World size 1 only (OCTET_CHECK).
  void read_greedy(const LlamaActivations& act, int64_t rows, int32_t* ids) const;
  /// The token of each of the first `rows` logits rows sampled on the backend with params:
  /// [rows] and their edits (at most kMaxSampleEdits) (Backend::sample_rows; uploaded here) into host `ids`: a token, kSampleNonFinite or
  /// kSampleSkipped (those rows' logits are intact for read_logit_rows). Rows sampled may have
  /// their logits overwritten. World size 1 only (OCTET_CHECK).
  void read_sampled(const LlamaActivations& act, int64_t rows, const SampleRowParams* params,
                    const std::vector<LogitEdit>& edits, int32_t* ids) const;

  /// forward() with activations and batch buffers made for this call; returns the logits rows
  /// downloaded (tests and one-off callers; the engine's runner keeps them preallocated).
  std::vector<float> forward(const ForwardBatch& batch, PagedKVCache& cache) const;
  /// forward() into `act` and `device`, grown first when the batch does not fit; returns the
  /// logits rows downloaded (tensor parallelism: on rank 0; empty on the others).
  std::vector<float> forward(const ForwardBatch& batch, PagedKVCache& cache,
                             LlamaActivations& act, ForwardBatchBuffers& device,
                             Communicator& comm = single_rank_communicator()) const;

 private:
  static LlamaModel build(const WeightSource& src, ModelConfig config, QuantConfig quant,
                          const LoadOptions& options);

  /// The recipe (file comment) over the n tokens of `device`: embeddings, per layer norm,
  /// q/k/v, RoPE, KV write and paged attention, o_proj and residual, norm, SwiGLU MLP and
  /// residual; then the final norm and lm_head for the num_rows rows of logits_indices, into
  /// act.logits. Every step but attention is per token, so rows never mix. Tensor parallel:
  /// this rank's heads and MLP rows; row-parallel outputs are all-reduced, the vocabulary
  /// shards gathered into act.gathered.
  void run_decoder(const ForwardBatchBuffers& device, int64_t n, int64_t num_rows,
                   const PagedAttentionBatch& attn_batch, PagedKVCache& cache,
                   LlamaActivations& act, Communicator& comm) const;

  std::shared_ptr<Backend> backend_;
  ModelConfig config_;
  QuantConfig quant_;
  LlamaWeights weights_;
  TensorParallelShard shard_;
  int64_t k_groups_ = 1;  // tensor_parallel_k_groups(config_)
  Buffer inv_freq_;        // [rotary_dim/2] FP32
  Buffer local_inv_freq_;  // [rotary_dim/2] FP32, the sliding layers' (rope_local_inv_freq)
  RopeLayout rope_layout_ = RopeLayout::AdjacentPairs;
};

}  // namespace octet
