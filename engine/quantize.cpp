#include "engine/quantize.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <cctype>
#include <string_view>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/common/half.h"
#include "kernels/common/weight_quant.h"
#include "models/checkpoint.h"
#include "models/checkpoint_writer.h"
#include "models/quant_config.h"

namespace octet {

namespace {

DType arithmetic_of(TensorDType d) {
  switch (d) {
    case TensorDType::BF16: return DType::BF16;
    case TensorDType::F16: return DType::F16;
    default: return DType::F32;
  }
}

// Scale values (exactly representable in `d` by construction) as bytes of dtype d.
std::vector<uint8_t> scale_bytes(const std::vector<float>& s, TensorDType d) {
  std::vector<uint8_t> out;
  if (d == TensorDType::BF16 || d == TensorDType::F16) {
    out.resize(s.size() * 2);
    for (size_t i = 0; i < s.size(); ++i) {
      const uint16_t b = d == TensorDType::BF16 ? float_to_bf16(s[i]) : float_to_fp16(s[i]);
      out[2 * i] = static_cast<uint8_t>(b);
      out[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
  } else {
    out.resize(s.size() * 4);
    std::memcpy(out.data(), s.data(), out.size());
  }
  return out;
}

/// Whether `name` is "model.layers.<N>.(self_attn|mlp).<word>_proj.weight" (a decoder layer's
/// linear weight). By hand: std::regex recurses per character and tensor names come from files.
bool is_layer_linear_weight(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.", kSuffix = "_proj.weight";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return false;
  size_t i = kPrefix.size();
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == kPrefix.size() || i >= name.size() || name[i] != '.') return false;
  std::string_view rest = name.substr(i + 1);
  if (rest.starts_with("self_attn.")) rest.remove_prefix(10);
  else if (rest.starts_with("mlp.")) rest.remove_prefix(4);
  else return false;
  if (rest.size() <= kSuffix.size()) return false;  // \w+ before "_proj": at least one character
  const std::string_view word = rest.substr(0, rest.size() - std::string_view(".weight").size());
  for (char c : word)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace

QuantizeReport quantize_checkpoint(const QuantizeOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(o.model, ec)) throw ModelFileError(o.model, "does not exist");
  if (!is_hf_checkpoint_dir(o.model))
    throw std::invalid_argument(o.model + ": quantize needs a Hugging Face checkpoint directory "
                                "(config.json + safetensors); convert a GGUF first with "
                                "scripts/make_hf_checkpoint.py");
  if (fs::exists(fs::path(o.output) / "config.json"))
    throw std::invalid_argument(o.output + ": already holds a checkpoint (config.json); choose "
                                "a new output directory");
  if (fs::exists(o.output, ec) && !(fs::is_directory(o.output, ec) && fs::is_empty(o.output, ec)))
    throw std::invalid_argument(o.output + ": exists and is not an empty directory; choose a new "
                                "output directory");
  const HFCheckpoint ckpt = HFCheckpoint::open(o.model);
  const QuantConfig q = QuantConfig::from_hf_config(ckpt.config(), o.model + "/config.json");
  if (q.quant_method != "none")
    throw std::invalid_argument(o.model + ": already quantized (quant_method " + q.quant_method +
                                ")");

  // Linear layers of the decoder layers; lm_head stays as it is (llm-compressor's ignore).
  Fp8DynamicCheckpoint out;
  out.source_config = &ckpt.config();
  QuantizeReport report;
  for (const std::string& name : ckpt.tensor_names()) {
    const TensorView* t = ckpt.find(name);
    report.input_bytes += static_cast<int64_t>(t->nbytes);
    const bool is_linear = is_layer_linear_weight(name) && t->shape.size() == 2;
    if (!is_linear) {
      WriterTensor w{name, t->dtype, t->shape, {}, {}};
      w.produce = [t] { return std::vector<uint8_t>(t->data, t->data + t->nbytes); };
      out.tensors.push_back(std::move(w));
      report.copied_tensors++;
      report.output_bytes += static_cast<int64_t>(t->nbytes);
      continue;
    }
    if (t->dtype != TensorDType::F32 && t->dtype != TensorDType::BF16 && t->dtype != TensorDType::F16)
      throw ModelFileError(t->file, "tensor " + name + " has dtype " + dtype_name(t->dtype) +
                                        ", expected F32, BF16 or F16");
    const int64_t n = t->shape[0], k = t->shape[1];
    // Quantize once, lazily, when the writer reaches the weight; the scale is produced with it.
    auto scales = std::make_shared<std::vector<float>>();
    WriterTensor w{name, TensorDType::F8_E4M3, {n, k}, {}, {}};
    w.produce = [t, n, k, scales] {
      const std::vector<float> x = t->to_f32();
      std::vector<uint8_t> codes(static_cast<size_t>(n * k));
      scales->resize(n);
      quantize_weight_e4m3_as(x.data(), n, k, ScaleGranularity::PerRow, arithmetic_of(t->dtype),
                              codes.data(), scales->data());
      return codes;
    };
    const std::string scale_name = name.substr(0, name.size() - 6) + "weight_scale";
    const TensorDType scale_dtype = t->dtype;  // llm-compressor stores scales in the model's dtype
    WriterTensor s{scale_name, scale_dtype, {n, 1}, {}, {}};
    s.produce = [t, n, k, scales, scale_dtype] {
      if (scales->empty()) {  // the writer placed the scale first: quantize now
        const std::vector<float> x = t->to_f32();
        std::vector<uint8_t> codes(static_cast<size_t>(n * k));
        scales->resize(n);
        quantize_weight_e4m3_as(x.data(), n, k, ScaleGranularity::PerRow,
                                arithmetic_of(t->dtype), codes.data(), scales->data());
      }
      return scale_bytes(*scales, scale_dtype);
    };
    out.tensors.push_back(std::move(w));
    out.tensors.push_back(std::move(s));
    report.quantized_linears++;
    report.output_bytes += n * k + n * dtype_size(scale_dtype);
  }
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "generation_config.json", "chat_template.jinja"})
    if (fs::exists(fs::path(o.model) / f)) out.copy_files.push_back((fs::path(o.model) / f).string());
  write_compressed_tensors_fp8_dynamic(o.output, out);
  return report;
}

}  // namespace octet
