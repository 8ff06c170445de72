#pragma once
// Checks an FP8 checkpoint's tensors against its QuantConfig before anything is loaded, so a
// malformed checkpoint fails with the tensor and the problem named (DESIGN.md: a missing or
// non-finite scale is never silently replaced).
#include <string>
#include <vector>

namespace octet {

class HFCheckpoint;
struct ModelConfig;
struct QuantConfig;

/// The linear modules of LlamaForCausalLM layer `layer` in HF naming, e.g.
/// "model.layers.3.self_attn.q_proj": q, k, v, o, gate, up, down (in that order).
std::vector<std::string> llama_linear_modules(int64_t layer);

/// For every linear module of a LlamaForCausalLM that `quant.is_quantized(name)` (the 7
/// projections of each layer, and lm_head when its weight is stored), checks:
///  - NAME.weight exists, is F8_E4M3, shape [out, in] as ModelConfig implies;
///  - NAME.weight_scale exists, dtype F32/BF16/F16, shape [out, 1] or [out] (channel) or
///    [1] or [] (tensor), every value finite and > 0;
///  - StaticPerTensor activations: NAME.input_scale exists, shape [1] or [], finite and > 0.
/// Does nothing when quant.weights_fp8 is false. Throws ModelFileError(file holding the tensor,
/// or the checkpoint directory when the tensor is missing, "tensor NAME: problem").
void validate_quantized_tensors(const QuantConfig& quant, const HFCheckpoint& ckpt,
                                const ModelConfig& model);

}  // namespace octet
