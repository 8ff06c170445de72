// HFCheckpoint: a Hugging Face model directory (config.json + safetensors weights).
// Weights, in this order of preference:
//   model.safetensors.index.json  {"weight_map": {tensor: shard file}}: each named shard is
//                                 opened; the index must agree with the shards' contents;
//   model.safetensors             a single file;
//   *.safetensors                 several files and no index (sorted by name).
// A tensor found in two files is an error (which copy would be meant is unknowable).

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "config/file_read.h"
#include "models/checkpoint.h"
#include "models/config_json.h"

namespace octet {

namespace fs = std::filesystem;

namespace {

bool is_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

}  // namespace

struct HFCheckpoint::Impl {
  std::string dir;
  nlohmann::json config;
  std::unique_ptr<nlohmann::json> generation_config;
  std::vector<SafetensorsFile> files;
  std::unordered_map<std::string, const TensorView*> tensors;

  /// Adds every tensor of `file`; a name already seen in another file is an error.
  void add(SafetensorsFile file) {
    files.push_back(std::move(file));
    const SafetensorsFile& f = files.back();
    for (const TensorView& t : f.tensors()) {
      const auto [it, inserted] = tensors.emplace(t.name, &t);
      if (!inserted)
        throw ModelFileError(dir, "tensor " + t.name + " is in both " + it->second->file +
                                      " and " + f.path());
    }
  }

  void open_index(const std::string& index_path) {
    const nlohmann::json index = read_config_json(index_path);
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object() || wm->empty())
      throw ModelFileError(index_path, "missing or empty weight_map");
    std::map<std::string, std::vector<std::string>> by_shard;  // shard file -> its tensors
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string())
        throw ModelFileError(index_path, "weight_map entry for " + name + " is not a string");
      const std::string s = shard.get<std::string>();
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        throw ModelFileError(index_path, "weight_map entry for " + name +
                                             " names an invalid shard file '" + s + "'");
      by_shard[s].push_back(name);
    }
    for (const auto& [shard, names] : by_shard) {
      const std::string path = dir + "/" + shard;
      if (!is_file(path))
        throw ModelFileError(index_path, "shard file " + shard + " (holding " + names.front() +
                                             ") does not exist");
      add(SafetensorsFile::open(path));
      const SafetensorsFile& f = files.back();
      for (const std::string& name : names) {
        if (!f.find(name))
          throw ModelFileError(index_path, "tensor " + name + " is listed in shard " + shard +
                                               " but that file does not hold it");
      }
    }
  }
};

HFCheckpoint HFCheckpoint::open(const std::string& dir_in) {
  auto impl = std::make_unique<Impl>();
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  impl->dir = dir;
  const std::string config_path = dir + "/config.json";
  if (!is_file(config_path)) throw ModelFileError(dir, "missing config.json");
  impl->config = read_config_json(config_path);
  if (const std::string g = dir + "/generation_config.json"; is_file(g))
    impl->generation_config = std::make_unique<nlohmann::json>(read_config_json(g));

  if (const std::string index = dir + "/model.safetensors.index.json"; is_file(index)) {
    impl->open_index(index);
  } else if (const std::string single = dir + "/model.safetensors"; is_file(single)) {
    impl->add(SafetensorsFile::open(single));
  } else {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors" && is_file(e.path().string()))
        found.push_back(e.path().string());
    }
    std::sort(found.begin(), found.end());
    if (found.empty())
      throw ModelFileError(dir, "no weights: neither model.safetensors, "
                                "model.safetensors.index.json nor any *.safetensors file");
    for (const std::string& p : found) impl->add(SafetensorsFile::open(p));
  }
  return HFCheckpoint(std::move(impl));
}

HFCheckpoint::HFCheckpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HFCheckpoint::HFCheckpoint(HFCheckpoint&&) noexcept = default;
HFCheckpoint& HFCheckpoint::operator=(HFCheckpoint&&) noexcept = default;
HFCheckpoint::~HFCheckpoint() = default;

const std::string& HFCheckpoint::dir() const { return impl_->dir; }
const nlohmann::json& HFCheckpoint::config() const { return impl_->config; }
const nlohmann::json* HFCheckpoint::generation_config() const {
  return impl_->generation_config.get();
}

const TensorView* HFCheckpoint::find(std::string_view name) const {
  const auto it = impl_->tensors.find(std::string(name));
  return it == impl_->tensors.end() ? nullptr : it->second;
}

const TensorView& HFCheckpoint::tensor(std::string_view name) const {
  const TensorView* t = find(name);
  if (!t) throw ModelFileError(impl_->dir, "missing tensor " + std::string(name));
  return *t;
}

std::vector<std::string> HFCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(impl_->tensors.size());
  for (const auto& [name, t] : impl_->tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

bool is_hf_checkpoint_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && is_file(path + "/config.json");
}

}  // namespace octet
