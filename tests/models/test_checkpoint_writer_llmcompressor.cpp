// octet's own FP8 quantization of SmolLM2-135M-Instruct against the checkpoints llm-compressor
// made from the same GGUF (scripts/make_llmcompressor_checkpoints.py):
//  1. (CI) the sampled FP8 codes and weight scales in tests/models/golden/llmcompressor_smollm2.json
//     for layers 0 and 29: octet dequantizes the GGUF, un-permutes Q/K rows to HF's layout, and
//     quantizes with kernels/cpu/w8a8.h's quantize_weight_e4m3; codes and scales must be
//     identical (both start from the same FP32 weights and apply compressed-tensors' rule).
//  2. (local, skipped when OCTET_LLMC_DIR is absent) both real checkpoints parse and
//     validate; every code and scale of every linear of both, with the fraction identical
//     printed, must equal octet's; then octet's writer
//     builds the FP8_DYNAMIC checkpoint from the GGUF and its model.safetensors must equal
//     llm-compressor's byte for byte, its config.json key for key.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_writer.h"  // TempDir
#include "kernels/cpu/w8a8.h"
#include "models/checkpoint.h"
#include "models/checkpoint_writer.h"
#include "models/gguf.h"
#include "models/model_config.h"
#include "models/quant_config.h"
#include "models/quant_validate.h"
#include "models/weight_source.h"

using namespace octet;
using nlohmann::json;

namespace {

const std::string kLlmcRoot = OCTET_LLMC_DIR;
// SmolLM2-135M: 9 query heads, 3 KV heads, head_dim 64.
const int64_t kHeads = 9, kKVHeads = 3, kHeadDim = 64;

json golden() {
  std::ifstream f(std::string(OCTET_SOURCE_DIR) +
                  "/tests/models/golden/llmcompressor_smollm2.json");
  REQUIRE(f.good());
  return json::parse(f);
}

bool have_gguf() { return std::filesystem::exists(OCTET_SMOLLM2_GGUF); }

/// Reported by CTest as skipped (SKIP_RETURN_CODE 77), never as passed.
[[noreturn]] void skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(77);
}

/// Inverse of llama.cpp convert_hf_to_gguf.py LlamaModel.permute
/// (w.reshape(n_head, 2, d/2, in).swapaxes(1, 2)): GGUF row h*d + 2i + j holds HF row
/// h*d + j*d/2 + i.
std::vector<float> unpermute_rows(const std::vector<float>& w, int64_t n_head, int64_t in) {
  std::vector<float> out(w.size());
  const int64_t d = kHeadDim;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(&out[size_t((h * d + j * d / 2 + i) * in)], &w[size_t((h * d + 2 * i + j) * in)],
                    size_t(in) * sizeof(float));
  return out;
}

/// A linear's FP32 weight [out, in] in HF row order, from the GGUF.
std::vector<float> hf_weight(const WeightSource& src, const std::string& module, int64_t out,
                             int64_t in) {
  std::vector<float> w = src.load_f32(module + ".weight", {out, in});
  if (src.rope_layout() == RopeLayout::AdjacentPairs) {
    if (module.ends_with("q_proj")) w = unpermute_rows(w, kHeads, in);
    if (module.ends_with("k_proj")) w = unpermute_rows(w, kKVHeads, in);
  }
  return w;
}

/// [out, in] of every tensor in the golden list.
std::map<std::string, std::vector<int64_t>> golden_shapes(const json& ckpt) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const json& t : ckpt["tensors"]) m[t[0]] = t[2].get<std::vector<int64_t>>();
  return m;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("octet quantization equals llm-compressor's sampled codes and scales",
          "[llmcompressor]") {
  if (!have_gguf()) skip(std::string("SmolLM2 GGUF not found at ") + OCTET_SMOLLM2_GGUF);
  const json g = golden();
  const GGUFFile file = GGUFFile::open(OCTET_SMOLLM2_GGUF);
  const auto src = make_gguf_weight_source(file);
  for (const char* key : {"fp8_dynamic", "fp8_static"}) {
    const json& ck = g["checkpoints"][key];
    const ScaleGranularity gran = std::string(key) == "fp8_dynamic" ? ScaleGranularity::PerRow
                                                                    : ScaleGranularity::PerTensor;
    const auto shapes = golden_shapes(ck);
    for (const json& s : ck["samples"]) {
      const std::string name = s["name"];
      INFO(key << " " << name);
      const std::vector<int64_t> shape = shapes.at(name + ".weight");
      const int64_t out = shape[0], in = shape[1];
      const std::vector<float> w = hf_weight(*src, name, out, in);
      std::vector<uint8_t> q(size_t(out * in));
      std::vector<float> scale(gran == ScaleGranularity::PerRow ? size_t(out) : 1);
      quantize_weight_e4m3(w.data(), out, in, gran, q.data(), scale.data());
      const auto codes = s["codes"].get<std::vector<std::vector<int>>>();
      for (size_t r = 0; r < codes.size(); ++r)
        for (size_t c = 0; c < codes[r].size(); ++c) {
          INFO("row " << r << " col " << c);
          REQUIRE(int(q[r * size_t(in) + c]) == codes[r][c]);
        }
      const auto want_scales = s["weight_scale"].get<std::vector<double>>();
      for (size_t r = 0; r < want_scales.size(); ++r)
        CHECK(scale[r] == float(want_scales[r]));  // exact: the golden holds the FP32 value
    }
  }
}

TEST_CASE("octet quantization and writer reproduce llm-compressor's checkpoints (local)",
          "[llmcompressor][local]") {
  const std::string dyn_dir = kLlmcRoot + "/SmolLM2-135M-Instruct-FP8-dynamic";
  const std::string static_dir = kLlmcRoot + "/SmolLM2-135M-Instruct-FP8-static";
  const std::string f32_dir = kLlmcRoot + "/SmolLM2-135M-Instruct-F32";
  if (!have_gguf() || !std::filesystem::exists(dyn_dir + "/model.safetensors") ||
      !std::filesystem::exists(static_dir + "/model.safetensors") ||
      !std::filesystem::exists(f32_dir + "/config.json")) {
    skip("llm-compressor checkpoints not found under " + kLlmcRoot +
         " (make them with scripts/make_llmcompressor_checkpoints.py)");
  }
  const GGUFFile file = GGUFFile::open(OCTET_SMOLLM2_GGUF);
  const auto src = make_gguf_weight_source(file);
  const HFCheckpoint dyn = HFCheckpoint::open(dyn_dir);
  const HFCheckpoint stat = HFCheckpoint::open(static_dir);
  // Both real checkpoints parse and pass validation.
  for (const HFCheckpoint* ck : {&dyn, &stat}) {
    const std::string cfg_path = ck->dir() + "/config.json";
    const QuantConfig q = QuantConfig::from_hf_config(ck->config(), cfg_path);
    CHECK(q.activation_scheme == (ck == &dyn ? ActivationScheme::DynamicPerToken
                                             : ActivationScheme::StaticPerTensor));
    CHECK_NOTHROW(validate_quantized_tensors(
        q, *ck, ModelConfig::from_hf_config(ck->config(), cfg_path)));
  }

  // Octet's FP8_DYNAMIC tensors: every linear quantized per channel, the rest as FP32.
  std::vector<WriterTensor> tensors;
  int64_t codes = 0, same_codes = 0, scales = 0, same_scales = 0;
  for (const std::string& name : dyn.tensor_names()) {
    const TensorView& t = dyn.tensor(name);
    if (name.ends_with(".weight_scale")) continue;
    if (t.dtype != TensorDType::F8_E4M3) {
      const std::vector<float> v = src->load_f32(name, t.shape);
      tensors.push_back({name, TensorDType::F32, t.shape, f32_bytes(v), {}});
      continue;
    }
    const std::string module = name.substr(0, name.size() - 7);
    const int64_t out = t.shape[0], in = t.shape[1];
    const std::vector<float> w = hf_weight(*src, module, out, in);
    for (const auto& [ck, gran] : {std::pair{&dyn, ScaleGranularity::PerRow},
                                   std::pair{&stat, ScaleGranularity::PerTensor}}) {
      std::vector<uint8_t> q(size_t(out * in));
      std::vector<float> s(gran == ScaleGranularity::PerRow ? size_t(out) : 1);
      quantize_weight_e4m3(w.data(), out, in, gran, q.data(), s.data());
      const TensorView& ref_q = ck->tensor(name);
      REQUIRE(ref_q.nbytes == q.size());
      for (size_t i = 0; i < q.size(); ++i) same_codes += q[i] == ref_q.data[i];
      codes += int64_t(q.size());
      const std::vector<float> ref_s = ck->tensor(module + ".weight_scale").to_f32();
      REQUIRE(ref_s.size() == s.size());
      for (size_t i = 0; i < s.size(); ++i) same_scales += s[i] == ref_s[i];
      scales += int64_t(s.size());
      if (gran == ScaleGranularity::PerRow) {
        tensors.push_back({name, TensorDType::F8_E4M3, {out, in}, q, {}});
        tensors.push_back({module + ".weight_scale", TensorDType::F32, {out, 1}, f32_bytes(s), {}});
      }
    }
  }
  std::cout << "llm-compressor vs octet FP8 weights (both checkpoints): codes identical "
            << same_codes << "/" << codes << " (" << 100.0 * double(same_codes) / double(codes)
            << "%), scales identical " << same_scales << "/" << scales << "\n";
  CHECK(same_codes == codes);
  CHECK(same_scales == scales);

  // The writer: same bytes as llm-compressor's model.safetensors, same config.json.
  testing::TempDir tmp;
  const json source = json::parse(read_text(f32_dir + "/config.json"));
  Fp8DynamicCheckpoint ck;
  ck.source_config = &source;
  ck.tensors = std::move(tensors);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                        "chat_template.jinja"})
    ck.copy_files.push_back(f32_dir + "/" + f);
  const std::string out = tmp.file("octet-fp8-dynamic");
  write_compressed_tensors_fp8_dynamic(out, ck);
  CHECK(json::parse(read_text(out + "/config.json")) ==
        json::parse(read_text(dyn_dir + "/config.json")));
  const std::string mine = read_text(out + "/model.safetensors");
  const std::string theirs = read_text(dyn_dir + "/model.safetensors");
  CHECK(mine.size() == theirs.size());
  CHECK(mine == theirs);  // not REQUIRE: a 220 MB diff message would be useless
  for (const char* f : {"recipe.yaml", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json", "chat_template.jinja"})
    CHECK(read_text(out + "/" + f) == read_text(dyn_dir + "/" + f));
}
