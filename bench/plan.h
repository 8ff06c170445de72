#pragma once
// `octet plan`: memory and decode-speed bounds of a deployment from first principles.
//   KV bytes per token  = sum over layers of 2 (K and V) x kv_heads x head_dim x bytes per element
//   sequences that fit  = floor((memory x utilization - reserved - weights) / KV bytes per sequence)
//   KV bytes per sequence: a sliding-window layer holds min(window, max_model_len) tokens (its
//                          blocks behind the window are freed; the engine keeps up to a block
//                          more, engine/kv_cache_setup.h prints the exact count)
//   bytes per decode step = weights + batch x KV bytes of the context (each read once)
//   floor per step      = bytes per step / memory bandwidth; tokens/s <= batch / floor
// Per device under tensor parallelism: weights split evenly, KV heads split (replicated when
// there are fewer KV heads than devices).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace octet::bench {

/// The shapes that decide memory (Llama-style decoder).
struct ModelShape {
  std::string name;
  int64_t hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0,
          num_key_value_heads = 0, head_dim = 0, intermediate_size = 0, vocab_size = 0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> layer_sliding_window;  // per layer, 0 = full attention (empty = all full)
};

/// Built-in shapes (from each model's published config.json): llama-3.1-8b, llama-3.1-70b,
/// llama-3.3-70b, qwen2.5-7b, smollm2-135m. nullopt for another name.
std::optional<ModelShape> model_preset(const std::string& name);
/// Names of the model presets, comma-separated (for messages).
std::string model_preset_names();

/// A preset name, a config.json file, a Hugging Face directory (its config.json) or a GGUF
/// file. Throws std::invalid_argument for a name that is none of them, and the model readers'
/// errors for a bad file.
ModelShape load_model_shape(const std::string& model);

struct DeviceSpec {
  std::string name;
  double memory_bytes = 0;     // total memory as nvidia-smi reports it
  double bandwidth_bytes_s = 0;  // peak memory bandwidth
};

/// h100-sxm-80gb (81559 MiB, 3.35 TB/s), h200-141gb (143771 MiB, 4.8 TB/s), a100-80gb
/// (81920 MiB, 2.039 TB/s), l40s (46068 MiB, 0.864 TB/s). "cpu" has no figures (the caller
/// measures or is given them). nullopt for another name.
std::optional<DeviceSpec> device_preset(const std::string& name);

struct PlanInputs {
  ModelShape model;
  DeviceSpec device;
  int64_t tensor_parallel_size = 1;
  int64_t max_model_len = 0;        // context per sequence, tokens
  int64_t batch_size = 1;           // sequences decoding together at max_model_len
  double gpu_memory_utilization = 0.9;
  double reserved_bytes = 0;        // runtime memory beside weights and KV, per device
  std::vector<int64_t> skip_layers; // layers whose KV stays 16-bit when the KV dtype is FP8
  std::string weight_dtype = "fp8"; // the pair the user asked for (marked in the output)
  std::string kv_cache_dtype = "fp8";
};

/// One weight dtype / KV dtype pair.
struct PlanRow {
  std::string weight_dtype, kv_cache_dtype;  // bf16 | fp8
  int64_t kv_bytes_per_token = 0;            // whole model (all layers, all KV heads)
  int64_t kv_bytes_per_token_window = 0;     // of which sliding-window layers (held W tokens)
  int64_t kv_bytes_per_sequence = 0;         // whole model, one sequence of max_model_len
  int64_t kv_bytes_per_sequence_per_device = 0;
  int64_t weight_bytes = 0;                  // whole model
  int64_t weight_bytes_per_device = 0;
  int64_t kv_budget_bytes_per_device = 0;    // memory x utilization - reserved - weights (>= 0)
  int64_t sequences_fit = 0;
  // Hybrid models (sliding-window layers): the same if window layers kept the whole context,
  // as without --disable-hybrid-kv-cache-manager's freeing (equal to the above otherwise).
  int64_t kv_bytes_per_sequence_full_context = 0;
  int64_t sequences_fit_full_context = 0;
  int64_t bytes_per_decode_step = 0;         // per device, batch_size sequences at max_model_len
  double decode_step_floor_ms = 0;
  double decode_tokens_per_s_floor = 0;      // batch_size / step floor, whole deployment
  bool batch_fits = false;                   // batch_size <= sequences_fit
  bool selected = false;                     // the pair given by the flags
};

/// Parameters of the model by kind (counts, not bytes).
struct ParamCounts {
  int64_t linear = 0;          // q, k, v, o, gate, up, down weights of every layer
  int64_t linear_out_channels = 0;  // output channels of those (one FP8 scale each)
  int64_t other = 0;           // embeddings, lm_head, norms, biases (stay 16-bit)
  int64_t total() const { return linear + other; }
};
ParamCounts count_params(const ModelShape& m);

/// The four pairs (bf16/bf16, bf16/fp8, fp8/bf16, fp8/fp8). Throws std::invalid_argument for
/// inputs out of range (non-positive lengths or sizes, a skip layer outside the model, a device
/// without memory or bandwidth).
std::vector<PlanRow> make_plan(const PlanInputs& in);

/// Text table of the inputs and the pairs side by side.
std::string plan_table(const PlanInputs& in, const std::vector<PlanRow>& rows);
/// {"inputs": {...}, "model": {...}, "plans": [row, ...]} with the PlanRow field names.
nlohmann::json plan_json(const PlanInputs& in, const std::vector<PlanRow>& rows);

}  // namespace octet::bench
