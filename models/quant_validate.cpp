#include "models/quant_validate.h"

#include <cmath>
#include <sstream>

#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/model_file_error.h"
#include "models/quant_config.h"

namespace octet {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

[[noreturn]] void bad(const TensorView& t, const std::string& problem) {
  throw ModelFileError(t.file, "tensor " + t.name + ": " + problem);
}

const TensorView& require(const HFCheckpoint& ckpt, const std::string& name,
                          const std::string& why) {
  const TensorView* t = ckpt.find(name);
  if (t == nullptr) throw ModelFileError(ckpt.dir(), "missing tensor " + name + " (" + why + ")");
  return *t;
}

/// Every value of a float scale tensor finite and > 0.
void check_scale_values(const TensorView& t) {
  if (t.dtype != TensorDType::F32 && t.dtype != TensorDType::BF16 && t.dtype != TensorDType::F16)
    bad(t, std::string("dtype ") + dtype_name(t.dtype) + ", expected F32, BF16 or F16");
  const std::vector<float> v = t.to_f32();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]))
      bad(t, "value " + std::string(std::isnan(v[i]) ? "NaN" : "inf") + " at index " +
                 std::to_string(i) + " (scales must be finite and > 0)");
    if (!(v[i] > 0.0f))
      bad(t, "value " + std::to_string(v[i]) + " at index " + std::to_string(i) +
                 " (scales must be finite and > 0)");
  }
}

bool is_scalar_shape(const std::vector<int64_t>& s) {
  return s.empty() || s == std::vector<int64_t>{1};
}

void validate_linear(const QuantConfig& quant, const HFCheckpoint& ckpt,
                     const std::string& module, int64_t out, int64_t in) {
  const TensorView& w = require(ckpt, module + ".weight", "quantized linear weight");
  if (w.dtype != TensorDType::F8_E4M3)
    bad(w, std::string("dtype ") + dtype_name(w.dtype) +
               ", expected F8_E4M3 (the quantization_config quantizes this module)");
  if (w.shape != std::vector<int64_t>{out, in})
    bad(w, "shape " + shape_str(w.shape) + ", expected " + shape_str({out, in}));

  const TensorView& s = require(ckpt, module + ".weight_scale", "scale of an F8_E4M3 weight");
  if (quant.weight_granularity == ScaleGranularity::PerRow) {
    if (s.shape != std::vector<int64_t>{out, 1} && s.shape != std::vector<int64_t>{out})
      bad(s, "shape " + shape_str(s.shape) + ", expected [" + std::to_string(out) + ", 1] or [" +
                 std::to_string(out) + "] (per-channel weight scales)");
  } else if (!is_scalar_shape(s.shape)) {
    bad(s, "shape " + shape_str(s.shape) + ", expected [1] or [] (per-tensor weight scale)");
  }
  check_scale_values(s);

  if (quant.activation_scheme == ActivationScheme::StaticPerTensor) {
    const TensorView& a =
        require(ckpt, module + ".input_scale", "static per-tensor activation scale");
    if (!is_scalar_shape(a.shape))
      bad(a, "shape " + shape_str(a.shape) + ", expected [1] or [] (per-tensor input scale)");
    check_scale_values(a);
  }
}

}  // namespace

std::vector<std::string> llama_linear_modules(int64_t layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  return {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj",
          p + "self_attn.o_proj", p + "mlp.gate_proj",    p + "mlp.up_proj",
          p + "mlp.down_proj"};
}

void validate_quantized_tensors(const QuantConfig& quant, const HFCheckpoint& ckpt,
                                const ModelConfig& m) {
  if (!quant.weights_fp8) return;
  const int64_t h = m.hidden_size, q = m.num_attention_heads * m.head_dim,
                kv = m.num_key_value_heads * m.head_dim, ff = m.intermediate_size;
  // [out, in] per projection, in llama_linear_modules order.
  const int64_t shapes[7][2] = {{q, h}, {kv, h}, {kv, h}, {h, q}, {ff, h}, {ff, h}, {h, ff}};
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    const std::vector<std::string> mods = llama_linear_modules(l);
    for (size_t i = 0; i < mods.size(); ++i)
      if (quant.is_quantized(mods[i])) validate_linear(quant, ckpt, mods[i], shapes[i][0], shapes[i][1]);
  }
  // lm_head: only when stored (tied embeddings have no lm_head.weight) and targeted.
  if (quant.is_quantized("lm_head") && ckpt.find("lm_head.weight") != nullptr)
    validate_linear(quant, ckpt, "lm_head", m.vocab_size, h);
}

}  // namespace octet
