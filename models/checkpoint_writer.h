#pragma once
// Writing Hugging Face checkpoints: safetensors files (single, or sharded with
// model.safetensors.index.json) and the FP8_DYNAMIC compressed-tensors layout that
// llm-compressor writes (`oneshot(..., QuantizationModifier(targets="Linear",
// scheme="FP8_DYNAMIC", ignore=["lm_head"]))` then `save_pretrained(save_compressed=True)`).
// Reference layout: tests/models/golden/llmcompressor_smollm2.json (made by
// scripts/make_llmcompressor_checkpoints.py with llmcompressor from PyPI).
// This file knows tensors as bytes only: quantization math lives in
// kernels/common/weight_quant.h and the
// caller (`octet quantize`) decides what each tensor holds.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/checkpoint.h"
#include "models/kv_scales.h"

namespace octet {

/// One tensor to write. Its data is `bytes` (size = product(shape) * dtype_size(dtype),
/// little-endian, row-major, outermost dimension first), or, when `bytes` is empty and `produce`
/// is set, what `produce()` returns; `produce` is called once, in file order, right before the
/// tensor is written, so a large model can be streamed without holding every tensor.
struct WriterTensor {
  std::string name;
  TensorDType dtype = TensorDType::F32;
  std::vector<int64_t> shape;  // [] is a scalar (1 element)
  std::vector<uint8_t> bytes;
  std::function<std::vector<uint8_t>()> produce;

  int64_t num_elements() const;
  uint64_t nbytes() const;  // num_elements() * dtype_size(dtype)
};

/// Writes one .safetensors file: u64 header length, JSON header ({"__metadata__": metadata,
/// name: {dtype, shape, data_offsets}}) padded with spaces to a multiple of 8 bytes, then the
/// data. Tensors are laid out as the safetensors library does: by dtype size descending, then by
/// name. Throws std::runtime_error("<path>: <problem>") on a duplicate name, a byte count that
/// does not match dtype x shape, or an I/O failure.
void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

/// Writes `tensors` into directory `dir` as transformers' save_pretrained does: one
/// model.safetensors when the total is at most max_shard_bytes, else
/// model-0000i-of-0000n.safetensors shards (tensors in name order, a new shard when the next
/// tensor would pass the limit) plus model.safetensors.index.json
/// {"metadata": {"total_size": bytes}, "weight_map": {name: file}}. Returns the file names.
std::vector<std::string> write_safetensors_checkpoint(const std::string& dir,
                                                      const std::vector<WriterTensor>& tensors,
                                                      uint64_t max_shard_bytes = 5000000000ull);

/// The `quantization_config` llm-compressor writes for scheme FP8_DYNAMIC (compressed-tensors
/// float-quantized: weights E4M3 per output channel, static, symmetric; input activations E4M3
/// per token, dynamic; ignore as given, e.g. {"lm_head"}). Same keys and values as
/// llm-compressor's output, with `version` the compressed-tensors version it mirrors.
nlohmann::json fp8_dynamic_quantization_config(const std::vector<std::string>& ignore);

/// The recipe.yaml llm-compressor saves beside such a checkpoint (records how it was made;
/// loaders ignore it). Ignore entries are written as given (plain names need no YAML quoting).
std::string fp8_dynamic_recipe_yaml(const std::vector<std::string>& ignore);

/// What write_compressed_tensors_fp8_dynamic writes.
struct Fp8DynamicCheckpoint {
  /// The source model's config.json (LlamaForCausalLM); written back with
  /// "quantization_config" = fp8_dynamic_quantization_config(ignore) (replacing any).
  const nlohmann::json* source_config = nullptr;
  /// Every tensor of the output: each quantized linear X as X.weight (F8_E4M3, [out, in]) and
  /// X.weight_scale (F32 [out, 1]); all other tensors (embeddings, norms, ignored linears) in
  /// their own dtype, names as in the HF checkpoint (no lm_head.weight for tied embeddings).
  std::vector<WriterTensor> tensors;
  /// Modules left unquantized, written to quantization_config.ignore.
  std::vector<std::string> ignore = {"lm_head"};
  /// Files copied into the output by file name (tokenizer.json, tokenizer_config.json,
  /// special_tokens_map.json, generation_config.json, ...); missing ones are an error.
  std::vector<std::string> copy_files;
  uint64_t max_shard_bytes = 5000000000ull;
};

/// Writes `ckpt` into directory `out_dir` (created if absent) laid out as llm-compressor's
/// FP8_DYNAMIC output: config.json, model.safetensors (or shards + index), recipe.yaml, the
/// copied files.
/// Checks before writing anything that every X.weight of dtype F8_E4M3 has an X.weight_scale
/// of shape [out, 1] and dtype F32/BF16/F16 and that no F8_E4M3 weight belongs to an ignored
/// module; throws std::invalid_argument naming the tensor otherwise (a caller bug), and
/// std::runtime_error("<path>: <problem>") on an I/O failure.
void write_compressed_tensors_fp8_dynamic(const std::string& out_dir,
                                          const Fp8DynamicCheckpoint& ckpt);

/// quantization_config.kv_cache_scheme as llm-compressor writes it for a static FP8 KV cache
/// (QuantizationModifier kv_cache_scheme {num_bits 8, type float, strategy, dynamic false,
/// symmetric true}, compressed-tensors 0.19 QuantizationArgs key set). strategy: tensor |
/// attn_head; throws std::invalid_argument otherwise.
nlohmann::json kv_cache_scheme_config(const std::string& strategy);

/// Whether `name` is a KV cache scale tensor of some layer (every name load_checkpoint_kv_scales
/// reads: self_attn.k_scale, .v_scale, .k_proj.k_scale, ..., .kv_scale).
bool is_kv_scale_tensor_name(const std::string& name);

/// model.layers.N.self_attn.k_scale and .v_scale for every layer, F32 (exact; llm-compressor
/// writes the model's dtype, which loaders convert): shape [1] for strategy "tensor" (each layer's
/// scales must then hold 1 value), [num_kv_heads, 1, 1] for "attn_head" (num_kv_heads values, or
/// 1 value repeated). Throws std::invalid_argument for another strategy or a wrong count.
std::vector<WriterTensor> kv_scale_tensors(const std::vector<LayerKVScales>& scales,
                                           const std::string& strategy, int64_t num_kv_heads);

}  // namespace octet
