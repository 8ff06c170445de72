#include "models/weight_source.h"

#include <string_view>

#include "models/checkpoint.h"
#include "models/gguf.h"

namespace octet {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string gguf_tensor_name(const std::string& hf_name, bool sandwich_norms) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (const auto& [hf, gg] : kTop)
    if (hf_name == hf) return gg;
  // "model.layers.<N>.<part>.<weight|bias>", parsed by hand (std::regex recurses per
  // character, and tensor names come from files).
  const std::string_view n = hf_name;
  constexpr std::string_view kPrefix = "model.layers.";
  if (!n.starts_with(kPrefix)) return "";
  size_t i = kPrefix.size();
  while (i < n.size() && n[i] >= '0' && n[i] <= '9') ++i;
  if (i == kPrefix.size() || i >= n.size() || n[i] != '.') return "";
  const std::string_view layer = n.substr(kPrefix.size(), i - kPrefix.size());
  std::string_view rest = n.substr(i + 1), kind;
  for (std::string_view k : {std::string_view("weight"), std::string_view("bias")})
    if (rest.size() > k.size() + 1 && rest.ends_with(k) && rest[rest.size() - k.size() - 1] == '.')
      kind = k;
  if (kind.empty()) return "";
  const std::string_view part = rest.substr(0, rest.size() - kind.size() - 1);
  static const std::pair<const char*, const char*> kLayerParts[] = {
      {"input_layernorm", "attn_norm"},      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},        {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},   {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},         {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},         {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},   {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
  };
  // Gemma: post_attention_layernorm normalizes the attention output (llama.cpp's
  // post_attention_norm); the MLP input norm is pre_feedforward_layernorm.
  if (sandwich_norms && part == "post_attention_layernorm")
    return "blk." + std::string(layer) + ".post_attention_norm." + std::string(kind);
  for (const auto& [hf, gg] : kLayerParts)
    if (part == hf)
      return "blk." + std::string(layer) + "." + gg + "." + std::string(kind);
  return "";
}

namespace {

class GGUFWeightSource final : public WeightSource {
 public:
  explicit GGUFWeightSource(const GGUFFile& f)
      : file_(f),
        qk_permuted_(f.get_string("general.architecture", "llama") == "llama"),
        sandwich_norms_(f.get_string("general.architecture", "llama") == "gemma3") {}
  const std::string& path() const override { return file_.path(); }
  bool has(const std::string& name) const override {
    const std::string g = gguf_tensor_name(name, sandwich_norms_);
    return !g.empty() && file_.find_tensor(g) != nullptr;
  }
  std::vector<float> load_f32(const std::string& name,
                              const std::vector<int64_t>& shape) const override {
    const std::string g = gguf_tensor_name(name, sandwich_norms_);
    if (g.empty()) throw ModelFileError(path(), "no GGUF name for tensor " + name);
    const GGUFTensorInfo& t = file_.tensor(g);
    // GGUF dims are ne[0] (fastest) first: the reverse of the PyTorch shape.
    const std::vector<int64_t> expected(shape.rbegin(), shape.rend());
    if (t.dims != expected)
      throw ModelFileError(path(), "tensor " + g + " has shape " + shape_str(t.dims) +
                                       ", expected " + shape_str(expected));
    return file_.dequantize(t);
  }
  const TensorView* raw(const std::string&) const override { return nullptr; }
  DType arithmetic(const std::string&) const override {
    return DType::F32;
  }
  // llama.cpp's converter permutes Q/K rows so that GGUF llama weights rotate adjacent pairs
  // (LLAMA_ROPE_TYPE_NORM); qwen2 keeps HF's rows and rotates halves (LLAMA_ROPE_TYPE_NEOX).
  RopeLayout rope_layout() const override {
    return qk_permuted_ ? RopeLayout::AdjacentPairs : RopeLayout::HalfSplit;
  }

 private:
  const GGUFFile& file_;
  bool qk_permuted_;
  bool sandwich_norms_;  // gemma3: see gguf_tensor_name
};

class HFWeightSource final : public WeightSource {
 public:
  explicit HFWeightSource(const HFCheckpoint& c) : ckpt_(c) {}
  const std::string& path() const override { return ckpt_.dir(); }
  bool has(const std::string& name) const override { return ckpt_.find(name) != nullptr; }
  std::vector<float> load_f32(const std::string& name,
                              const std::vector<int64_t>& shape) const override {
    const TensorView& t = ckpt_.tensor(name);
    if (t.dtype == TensorDType::F8_E4M3 || t.dtype == TensorDType::F8_E5M2)
      throw ModelFileError(t.file, "tensor " + name + " is " + dtype_name(t.dtype) +
                                       " but config.json's quantization_config does not quantize "
                                       "its module (no quantization_config, or the module is in "
                                       "ignore): its scales would be ignored");
    if (t.shape != shape)
      throw ModelFileError(t.file, "tensor " + name + " has shape " + shape_str(t.shape) +
                                       ", expected " + shape_str(shape));
    return t.to_f32();
  }
  const TensorView* raw(const std::string& name) const override { return ckpt_.find(name); }
  DType arithmetic(const std::string& name) const override {
    const TensorView* t = ckpt_.find(name);
    if (t && t->dtype == TensorDType::BF16) return DType::BF16;
    if (t && t->dtype == TensorDType::F16) return DType::F16;
    return DType::F32;
  }
  RopeLayout rope_layout() const override { return RopeLayout::HalfSplit; }

 private:
  const HFCheckpoint& ckpt_;
};

}  // namespace

std::unique_ptr<WeightSource> make_gguf_weight_source(const GGUFFile& file) {
  return std::make_unique<GGUFWeightSource>(file);
}
std::unique_ptr<WeightSource> make_hf_weight_source(const HFCheckpoint& checkpoint) {
  return std::make_unique<HFWeightSource>(checkpoint);
}

}  // namespace octet
