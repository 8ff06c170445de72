#pragma once
// WeightSource: one way to read a Llama checkpoint's tensors by their Hugging Face names
// (model.layers.N.self_attn.q_proj.weight, ...) and PyTorch shapes ([out, in]), whether they
// live in a GGUF file (llama.cpp names, dims reversed; for architecture "llama" Q/K rows permuted
// for adjacent-pair RoPE, for "qwen2" not) or in an HF safetensors checkpoint. Biases:
// model.layers.N.self_attn.q_proj.bias <-> blk.N.attn_q.bias.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/dtype.h"

namespace octet {

class GGUFFile;
class HFCheckpoint;
struct TensorView;

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  /// File or directory, for error messages.
  virtual const std::string& path() const = 0;
  virtual bool has(const std::string& name) const = 0;
  /// FP32 values of tensor `name`; throws ModelFileError(path, ...) when it is missing
  /// ("missing tensor NAME"), has another shape ("tensor NAME has shape [..], expected [..]"),
  /// or a type that cannot be converted.
  virtual std::vector<float> load_f32(const std::string& name,
                                      const std::vector<int64_t>& shape) const = 0;
  /// The stored tensor, when the source keeps safetensors tensors (FP8 checkpoints); nullptr
  /// for GGUF or when absent.
  virtual const TensorView* raw(const std::string& name) const = 0;
  /// The dtype compressed-tensors would do quantization arithmetic in for tensor `name`: the
  /// stored dtype for 16-bit safetensors, Float32 otherwise (GGUF values are dequantized FP32).
  virtual DType arithmetic(const std::string& name) const = 0;
  /// How this source's Q/K rows pair dimensions for RoPE.
  virtual RopeLayout rope_layout() const = 0;
};

/// GGUF tensors under HF names (token_embd.weight <-> model.embed_tokens.weight, ...).
std::unique_ptr<WeightSource> make_gguf_weight_source(const GGUFFile& file);
/// HF safetensors tensors.
std::unique_ptr<WeightSource> make_hf_weight_source(const HFCheckpoint& checkpoint);

/// "model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight" (empty when unknown).
/// sandwich_norms (gemma3): post_attention_layernorm is "post_attention_norm", not "ffn_norm".
std::string gguf_tensor_name(const std::string& hf_name, bool sandwich_norms = false);

/// "[576, 192]".
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace octet
