#pragma once
// --load-format dummy (vLLM's name): a Llama-family model of any shape with seeded random
// weights and no weight file, so that speed and memory at real sizes (Llama-3.1-8B, -70B) are
// measured without a checkpoint. The architecture is a config.json (models/model_presets.h, or
// a file); the weights are those of an FP8_DYNAMIC compressed-tensors checkpoint: E4M3 linears
// with per-output-channel (or per-tensor) scales, BF16 lm_head, FP32 embeddings and norms.
//
// Values (what keeps activations finite and O(1) at any depth): every linear W [out, in] is
// ~ N(0, 1/in) (so a unit-RMS input gives unit-variance outputs), its codes drawn from a fixed
// 256-entry table (the E4M3 codes of the normal quantiles (i + 0.5) / 256, scaled so the largest
// is 448) and its scale s[r] = jitter[r] / (sqrt(in) * std of the table's values), jitter in
// [0.75, 1.25) per channel; embeddings ~ N(0, 1), lm_head ~ N(0, 1/hidden) (logits ~ N(0, 1)),
// norm weights 1, biases ~ N(0, 0.02^2). Every value is a pure function of (seed, tensor name,
// row, column) (splitmix64 over a counter, Steele et al. 2014): the same seed gives the same
// bytes whatever the tensor-parallel layout, and a rank's shard is the slice of the whole.
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "models/llama.h"
#include "models/model_config.h"
#include "models/quant_config.h"
#include "models/weight_source.h"

namespace octet {

/// The seed of dummy weights when none is given (--seed -1).
inline constexpr uint64_t kDefaultDummySeed = 0;

/// What --model names under --load-format dummy, before the tokenizer is known.
struct DummyModelSpec {
  nlohmann::json config;      // config.json (vocab_size filled in later when vocab_from_tokenizer)
  std::string label;          // "preset tiny-llama" or the config.json path, for messages
  std::string dir;            // the directory holding config.json; "" for a preset
  bool vocab_from_tokenizer = false;
};

/// Resolves --model for --load-format dummy: a preset name (models/model_presets.h), a
/// directory holding config.json, or a config.json file. Throws std::invalid_argument naming
/// the presets when it is none of these; ModelFileError naming the file for unreadable JSON.
DummyModelSpec find_dummy_model(const std::string& model);

/// The ModelConfig of `spec` (vocab_size = tokenizer_vocab when spec.vocab_from_tokenizer).
/// Throws ModelFileError as ModelConfig::from_hf_config does.
ModelConfig dummy_model_config(const DummyModelSpec& spec, int64_t tokenizer_vocab);

/// How dummy linears are stored: compressed-tensors FP8 E4M3 with `granularity` weight scales
/// and dynamic per-token activations; lm_head ignored (stays 16-bit, as real FP8 checkpoints).
QuantConfig dummy_quant_config(ScaleGranularity granularity);

/// The tensors of `config` under their Hugging Face names (file comment for the values):
/// linears through raw() (E4M3 codes and weight_scale, full shapes), everything else through
/// load_f32(). Each call generates the tensor asked for; raw() keeps the last weight and the
/// last scale it made alive until the next call of that kind. One per thread (rank).
class DummyWeightSource final : public WeightSource {
 public:
  DummyWeightSource(const ModelConfig& config, uint64_t seed, ScaleGranularity granularity,
                    std::string label);
  ~DummyWeightSource() override;
  const std::string& path() const override;
  bool has(const std::string& name) const override;
  /// Throws ModelFileError for an unknown name or a shape other than the config's.
  std::vector<float> load_f32(const std::string& name,
                              const std::vector<int64_t>& shape) const override;
  const TensorView* raw(const std::string& name) const override;
  DType arithmetic(const std::string&) const override { return DType::F32; }
  RopeLayout rope_layout() const override { return RopeLayout::HalfSplit; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One rank's dummy model (options.rank of options.world_size), built by the same path as a
/// checkpoint's (LlamaModel::load over a DummyWeightSource): each tensor is generated, cut to
/// the rank's shard, uploaded to the backend and freed before the next, so the host never holds
/// more than one whole tensor beside the embedding table. seed < 0: kDefaultDummySeed. Throws
/// std::invalid_argument as LlamaModel::load does (bad options, TP sizes that do not divide).
LlamaModel load_dummy_model(const ModelConfig& config, int64_t seed, const LoadOptions& options);

}  // namespace octet
