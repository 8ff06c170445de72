#pragma once
// Test helper: the tiny sliding-window checkpoints of tests/models/golden/tiny_<arch>/ are
// committed without weights; weights.json holds their recipe (seed, tensor names, shapes, init
// rule) and this writes model.safetensors from it, bit-identical to the weights
// scripts/make_sliding_window_reference.py gave transformers (see portable_values there).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_writer.h"
#include "models/checkpoint_writer.h"

namespace octet::testing {

/// Values of one tensor: SplitMix64 seeded with seed ^ fnv1a64(name); u = top 24 bits / 2^24;
/// z = sqrt(3) (2u - 1); norm 1 + 0.2 z, bias 0.5 z, embed z, linear z * 0.7 / sqrt(in); all in
/// double, rounded once to float.
inline std::vector<float> tiny_tensor_values(const std::string& name,
                                             const std::vector<int64_t>& shape,
                                             const std::string& rule, uint64_t seed) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  uint64_t state = seed ^ h;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  const double scale = rule == "linear" ? 0.7 / std::sqrt(static_cast<double>(shape.at(1))) : 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 40) / static_cast<double>(1 << 24);
    double v = std::sqrt(3.0) * (2.0 * u - 1.0);
    if (rule == "norm") v = 1.0 + 0.2 * v;
    else if (rule == "bias") v = 0.5 * v;
    else if (rule == "linear") v = v * scale;
    out[static_cast<size_t>(i)] = static_cast<float>(v);
  }
  return out;
}

/// A loadable copy of golden tiny model `name` ("tiny_llama", "tiny_mistral", "tiny_qwen2"),
/// written once per process into a temporary directory.
inline std::string tiny_model_dir(const std::string& name) {
  namespace fs = std::filesystem;
  static TempDir dir;
  static std::map<std::string, std::string> made;
  if (auto it = made.find(name); it != made.end()) return it->second;
  const std::string src = std::string(OCTET_SOURCE_DIR) + "/tests/models/golden/" + name;
  const std::string dst = dir.file(name);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "weights.json")
      fs::copy_file(e.path(), dst + "/" + e.path().filename().string());
  std::ifstream in(src + "/weights.json");
  const nlohmann::json recipe = nlohmann::json::parse(in);
  std::vector<WriterTensor> tensors;
  for (const auto& t : recipe["tensors"]) {
    WriterTensor w;
    w.name = t["name"];
    w.shape = t["shape"].get<std::vector<int64_t>>();
    const std::vector<float> v =
        tiny_tensor_values(w.name, w.shape, t["rule"], recipe["seed"].get<uint64_t>());
    w.bytes.resize(v.size() * sizeof(float));
    std::memcpy(w.bytes.data(), v.data(), w.bytes.size());
    tensors.push_back(std::move(w));
  }
  write_safetensors(dst + "/model.safetensors", tensors);
  return made[name] = dst;
}

}  // namespace octet::testing
