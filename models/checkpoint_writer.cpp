#include "models/checkpoint_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace octet {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t WriterTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t WriterTensor::nbytes() const {
  return static_cast<uint64_t>(num_elements()) * static_cast<uint64_t>(dtype_size(dtype));
}

namespace {

[[noreturn]] void io_fail(const std::string& path, const std::string& problem) {
  throw std::runtime_error(path + ": " + problem);
}

/// safetensors' file order: dtype size descending, then name (the Rust library sorts by its
/// Dtype enum, descending, which orders by size).
std::vector<const WriterTensor*> file_order(const std::vector<WriterTensor>& tensors) {
  std::vector<const WriterTensor*> order;
  for (const WriterTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const WriterTensor* a, const WriterTensor* b) {
    const int64_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    if (sa != sb) return sa > sb;
    return a->name < b->name;
  });
  return order;
}

void write_json_file(const std::string& path, const json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) io_fail(path, "cannot open for writing");
  out << j.dump(2) << "\n";
  if (!out) io_fail(path, "write failed");
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  for (const WriterTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") io_fail(path, "invalid tensor name '" + t.name + "'");
    if (!seen.insert(t.name).second) io_fail(path, "duplicate tensor " + t.name);
    for (int64_t d : t.shape)
      if (d < 0) io_fail(path, "tensor " + t.name + " has a negative dimension");
    if (!t.bytes.empty() || !t.produce) {
      if (t.bytes.size() != t.nbytes())
        io_fail(path, "tensor " + t.name + " has " + std::to_string(t.bytes.size()) +
                          " bytes, its dtype and shape need " + std::to_string(t.nbytes()));
    }
  }
  const std::vector<const WriterTensor*> order = file_order(tensors);

  // Header: "__metadata__" first, then tensors in file order (nlohmann's ordered_json keeps it).
  nlohmann::ordered_json header;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const WriterTensor* t : order) {
    const uint64_t n = t->nbytes();
    header[t->name] = {{"dtype", dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) io_fail(path, "cannot open for writing");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const WriterTensor* t : order) {
    if (!t->bytes.empty() || !t->produce) {
      out.write(reinterpret_cast<const char*>(t->bytes.data()),
                static_cast<std::streamsize>(t->bytes.size()));
    } else {
      const std::vector<uint8_t> b = t->produce();
      if (b.size() != t->nbytes())
        io_fail(path, "tensor " + t->name + ": produce() returned " + std::to_string(b.size()) +
                          " bytes, its dtype and shape need " + std::to_string(t->nbytes()));
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
  }
  out.flush();
  if (!out) io_fail(path, "write failed");
}

std::vector<std::string> write_safetensors_checkpoint(const std::string& dir,
                                                      const std::vector<WriterTensor>& tensors,
                                                      uint64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) io_fail(dir, "cannot create directory: " + ec.message());
  uint64_t total = 0;
  for (const WriterTensor& t : tensors) total += t.nbytes();
  if (total <= max_shard_bytes) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
    return {"model.safetensors"};
  }
  // Shards: tensors in name order, a new shard when the next tensor would pass the limit.
  std::vector<const WriterTensor*> by_name;
  for (const WriterTensor& t : tensors) by_name.push_back(&t);
  std::sort(by_name.begin(), by_name.end(),
            [](const WriterTensor* a, const WriterTensor* b) { return a->name < b->name; });
  std::vector<std::vector<const WriterTensor*>> shards(1);
  uint64_t in_shard = 0;
  for (const WriterTensor* t : by_name) {
    if (in_shard > 0 && in_shard + t->nbytes() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += t->nbytes();
  }
  std::vector<std::string> files;
  json weight_map = json::object();
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    std::vector<WriterTensor> part;
    part.reserve(shards[i].size());
    for (const WriterTensor* t : shards[i]) {
      part.push_back(*t);  // copies bytes; streamed tensors copy only the callback
      weight_map[t->name] = name;
    }
    write_safetensors((fs::path(dir) / name).string(), part);
    files.push_back(name);
  }
  write_json_file((fs::path(dir) / "model.safetensors.index.json").string(),
                  {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  files.push_back("model.safetensors.index.json");
  return files;
}

json fp8_dynamic_quantization_config(const std::vector<std::string>& ignore) {
  // Key set and values as llmcompressor 0.14.0.1 / compressed-tensors 0.19.0 write them for
  // FP8_DYNAMIC (tests/models/golden/llmcompressor_smollm2.json, checkpoints.fp8_dynamic).
  const json weights = {
      {"actorder", nullptr},   {"block_structure", nullptr}, {"dynamic", false},
      {"group_size", nullptr}, {"num_bits", 8},              {"observer", "memoryless_minmax"},
      {"observer_kwargs", json::object()}, {"scale_dtype", nullptr},
      {"strategy", "channel"}, {"symmetric", true},          {"type", "float"},
      {"zp_dtype", nullptr}};
  const json input_activations = {
      {"actorder", nullptr},   {"block_structure", nullptr}, {"dynamic", true},
      {"group_size", nullptr}, {"num_bits", 8},              {"observer", nullptr},
      {"observer_kwargs", json::object()}, {"scale_dtype", nullptr},
      {"strategy", "token"},   {"symmetric", true},          {"type", "float"},
      {"zp_dtype", nullptr}};
  return {
      {"config_groups",
       {{"group_0",
         {{"format", "float-quantized"},
          {"input_activations", input_activations},
          {"output_activations", nullptr},
          {"targets", {"Linear"}},
          {"weights", weights}}}}},
      {"format", "float-quantized"},
      {"global_compression_ratio", nullptr},
      {"ignore", ignore},
      {"kv_cache_scheme", nullptr},
      {"quant_method", "compressed-tensors"},
      {"quantization_status", "compressed"},
      {"sparsity_config", json::object()},
      {"transform_config", json::object()},
      {"version", "0.19.0"},
  };
}

std::string fp8_dynamic_recipe_yaml(const std::vector<std::string>& ignore) {
  std::string list;
  for (size_t i = 0; i < ignore.size(); ++i) list += (i ? ", " : "") + ignore[i];
  return "default_stage:\n"
         "  default_modifiers:\n"
         "    QuantizationModifier:\n"
         "      targets: [Linear]\n"
         "      ignore: [" + list + "]\n"
         "      scheme: FP8_DYNAMIC\n"
         "      bypass_divisibility_checks: false\n"
         "      requires_calibration_data: false\n";
}

void write_compressed_tensors_fp8_dynamic(const std::string& out_dir,
                                          const Fp8DynamicCheckpoint& ckpt) {
  if (ckpt.source_config == nullptr || !ckpt.source_config->is_object())
    throw std::invalid_argument("write_compressed_tensors_fp8_dynamic: no source config.json");
  std::map<std::string, const WriterTensor*> by_name;
  for (const WriterTensor& t : ckpt.tensors) by_name[t.name] = &t;
  auto is_ignored = [&](const std::string& module) {
    return std::find(ckpt.ignore.begin(), ckpt.ignore.end(), module) != ckpt.ignore.end();
  };
  for (const WriterTensor& t : ckpt.tensors) {
    if (t.dtype != TensorDType::F8_E4M3) continue;
    if (!t.name.ends_with(".weight") || t.shape.size() != 2)
      throw std::invalid_argument("tensor " + t.name +
                                  ": F8_E4M3 only for 2-D linear weights [out, in]");
    const std::string module = t.name.substr(0, t.name.size() - 7);
    if (is_ignored(module))
      throw std::invalid_argument("tensor " + t.name + " is F8_E4M3 but " + module +
                                  " is in ignore");
    auto s = by_name.find(module + ".weight_scale");
    if (s == by_name.end())
      throw std::invalid_argument("tensor " + t.name + " has no " + module + ".weight_scale");
    const WriterTensor& sc = *s->second;
    if (sc.shape != std::vector<int64_t>{t.shape[0], 1})
      throw std::invalid_argument("tensor " + sc.name + " must have shape [" +
                                  std::to_string(t.shape[0]) + ", 1]");
    if (sc.dtype != TensorDType::F32 && sc.dtype != TensorDType::BF16 && sc.dtype != TensorDType::F16)
      throw std::invalid_argument("tensor " + sc.name + " must be F32, BF16 or F16");
  }
  for (const std::string& f : ckpt.copy_files)
    if (!fs::is_regular_file(f)) io_fail(f, "file to copy into the checkpoint does not exist");

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) io_fail(out_dir, "cannot create directory: " + ec.message());
  json config = *ckpt.source_config;
  config["quantization_config"] = fp8_dynamic_quantization_config(ckpt.ignore);
  write_json_file((fs::path(out_dir) / "config.json").string(), config);
  write_safetensors_checkpoint(out_dir, ckpt.tensors, ckpt.max_shard_bytes);
  {
    const std::string path = (fs::path(out_dir) / "recipe.yaml").string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << fp8_dynamic_recipe_yaml(ckpt.ignore);
    if (!out) io_fail(path, "write failed");
  }
  for (const std::string& f : ckpt.copy_files) {
    const fs::path dst = fs::path(out_dir) / fs::path(f).filename();
    fs::copy_file(f, dst, fs::copy_options::overwrite_existing, ec);
    if (ec) io_fail(dst.string(), "cannot copy " + f + ": " + ec.message());
  }
}

json kv_cache_scheme_config(const std::string& strategy) {
  if (strategy != "tensor" && strategy != "attn_head")
    throw std::invalid_argument("kv_cache_scheme strategy " + strategy +
                                ": expected tensor or attn_head");
  return {{"actorder", nullptr},   {"block_structure", nullptr}, {"dynamic", false},
          {"group_size", nullptr}, {"num_bits", 8},              {"observer", nullptr},
          {"observer_kwargs", json::object()}, {"scale_dtype", nullptr},
          {"strategy", strategy},  {"symmetric", true},          {"type", "float"},
          {"zp_dtype", nullptr}};
}

bool is_kv_scale_tensor_name(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const size_t mid = name.find(".self_attn.");
  if (mid == std::string::npos) return false;
  const std::string suffix = name.substr(mid + 11);
  for (const char* s : {"k_scale", "v_scale", "k_proj.k_scale", "v_proj.v_scale",
                        "k_proj.output_scale", "v_proj.output_scale", "attn.k_scale",
                        "attn.v_scale", "kv_scale"})
    if (suffix == s) return true;
  return false;
}

std::vector<WriterTensor> kv_scale_tensors(const std::vector<LayerKVScales>& scales,
                                           const std::string& strategy, int64_t num_kv_heads) {
  (void)kv_cache_scheme_config(strategy);  // validates the strategy
  const bool per_head = strategy == "attn_head";
  std::vector<WriterTensor> out;
  for (size_t l = 0; l < scales.size(); ++l)
    for (auto [name, s] : {std::pair{"k_scale", &scales[l].k_scale},
                           std::pair{"v_scale", &scales[l].v_scale}}) {
      std::vector<float> v = *s;
      if (per_head && v.size() == 1) v.assign(static_cast<size_t>(num_kv_heads), v[0]);
      const size_t want = per_head ? static_cast<size_t>(num_kv_heads) : 1;
      if (v.size() != want)
        throw std::invalid_argument("kv_scale_tensors: layer " + std::to_string(l) + " " + name +
                                    " has " + std::to_string(s->size()) + " values, strategy " +
                                    strategy + " needs " + std::to_string(want));
      WriterTensor t;
      t.name = "model.layers." + std::to_string(l) + ".self_attn." + name;
      t.dtype = TensorDType::F32;
      t.shape = per_head ? std::vector<int64_t>{num_kv_heads, 1, 1} : std::vector<int64_t>{1};
      t.bytes.resize(v.size() * sizeof(float));
      std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
      out.push_back(std::move(t));
    }
  return out;
}

}  // namespace octet
