#pragma once
// Hugging Face checkpoints: safetensors files (single or sharded with
// model.safetensors.index.json) and the JSON files beside them.
// safetensors format: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32"|"F16"|"BF16"|"F8_E4M3"|..., "shape": [..], "data_offsets": [b, e]},
//    "__metadata__": {...}}, then the data; offsets are relative to the end of the header.
//   (https://huggingface.co/docs/safetensors/index#format)
// Shapes are PyTorch order (outermost first): a linear weight is [out, in].
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/model_file_error.h"

namespace octet {

enum class TensorDType { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL };

/// "F32", "BF16", "F8_E4M3", ... as safetensors spells them.
const char* dtype_name(TensorDType d);
/// Bytes per element.
int64_t dtype_size(TensorDType d);

/// One tensor inside a mapped file; data valid while the owning file lives.
struct TensorView {
  std::string name;
  TensorDType dtype = TensorDType::F32;
  std::vector<int64_t> shape;  // outermost first
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  std::string file;            // path of the file holding it (for error messages)

  int64_t num_elements() const;
  /// Converts F32/F16/BF16 (and F8_E4M3/E5M2 decoded without scale) to FP32.
  /// Throws ModelFileError(file, "tensor NAME has dtype X, expected a float type").
  std::vector<float> to_f32() const;
};

/// A memory-mapped .safetensors file. open() validates the header (JSON, dtypes, shapes versus
/// offsets, offsets within the file, no overlaps); errors are ModelFileError(path, problem).
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();
  const std::string& path() const;
  const std::vector<TensorView>& tensors() const;
  const TensorView* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__"

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl>);
  std::unique_ptr<Impl> impl_;
};

/// A Hugging Face model directory: config.json, model.safetensors or the shards named by
/// model.safetensors.index.json, and optionally generation_config.json, tokenizer.json,
/// tokenizer_config.json. Errors (ModelFileError naming the file): missing config.json,
/// malformed JSON, an index naming a missing shard file, a tensor listed in the index but absent
/// from its shard, no weights at all.
class HFCheckpoint {
 public:
  static HFCheckpoint open(const std::string& dir);
  HFCheckpoint(HFCheckpoint&&) noexcept;
  HFCheckpoint& operator=(HFCheckpoint&&) noexcept;
  ~HFCheckpoint();

  const std::string& dir() const;
  const nlohmann::json& config() const;             // config.json
  const nlohmann::json* generation_config() const;  // nullptr when absent
  const TensorView* find(std::string_view name) const;  // over all shards; nullptr if absent
  /// The tensor or ModelFileError(dir, "missing tensor NAME").
  const TensorView& tensor(std::string_view name) const;
  std::vector<std::string> tensor_names() const;   // sorted

 private:
  struct Impl;
  explicit HFCheckpoint(std::unique_ptr<Impl>);
  std::unique_ptr<Impl> impl_;
};

/// True when `path` is a directory holding config.json (an HF checkpoint), false for a file.
bool is_hf_checkpoint_dir(const std::string& path);

}  // namespace octet
