#pragma once
// GGUF v3 reader (llama.cpp's single-file model format), memory-mapped.
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
//   magic "GGUF", u32 version (3; 2 also read), u64 tensor_count, u64 metadata_kv_count,
//   metadata key/value pairs, tensor infos, padding to general.alignment (default 32), data.
// All integers little-endian. Tensor dims are listed fastest-varying first (ne[0] = row length),
// so a GGUF linear weight of dims [in, out] is an [out, in] row-major matrix.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "models/model_file_error.h"

namespace octet {

/// ggml tensor types (values as stored in GGUF tensor infos).
enum class GGMLType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
};
// GGUFFile::open accepts every type above except the removed ids 4 and 5; dequantize_row handles
// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.

/// Name as llama.cpp prints it ("F32", "Q4_K", ...); "type<N>" for unknown values.
std::string ggml_type_name(GGMLType type);

/// Elements per block (1 for F32/F16/BF16, 32 for Q8_0..., 256 for K-quants) and bytes per
/// block; both 0 for types this reader does not know.
int64_t ggml_block_elems(GGMLType type);
int64_t ggml_block_bytes(GGMLType type);

/// True when dequantize_row() supports the type.
bool ggml_can_dequantize(GGMLType type);

/// Dequantize n elements (n a multiple of the type's block size) from raw GGUF bytes to float32.
/// Throws std::invalid_argument for unsupported types or a bad n.
void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n);

enum class GGUFValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

/// "uint8", "string", "array", ... ("unknown" for values outside the enum).
const char* gguf_value_type_name(GGUFValueType type);

struct GGUFValue;

/// One metadata array, held in about its size in the file (nlohmann-style trees of one value
/// per element cost ~50x): numbers and bools keep their little-endian bytes, strings one shared
/// character buffer plus an end offset each, nested arrays (depth <= 8) a GGUFArray each (~100
/// bytes for the 12 an empty one takes in the file). Elements are decoded on access.
class GGUFArray {
 public:
  GGUFArray() = default;

  GGUFValueType type() const { return type_; }  // element type
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  /// Element i (< size()) as a GGUFValue; strings and nested arrays are copied.
  GGUFValue operator[](size_t i) const;
  /// Typed reads of element i (< size()); a wrong element type throws std::runtime_error
  /// naming the expected and the actual type, as GGUFValue's accessors do.
  int64_t int_at(size_t i) const;     // any integer type (uint64 above INT64_MAX throws)
  double float_at(size_t i) const;    // float or integer types
  bool bool_at(size_t i) const;
  std::string_view string_at(size_t i) const;  // valid while this array lives
  const GGUFArray& array_at(size_t i) const;

  /// Heap bytes held by the elements (nested arrays included), for tests
  /// and memory budgets.
  size_t heap_bytes() const;

  /// Iterates elements as GGUFValues (operator[] per step).
  class const_iterator {
   public:
    using value_type = GGUFValue;
    using difference_type = std::ptrdiff_t;
    const_iterator(const GGUFArray* a, size_t i) : a_(a), i_(i) {}
    GGUFValue operator*() const;
    const_iterator& operator++() { ++i_; return *this; }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    const GGUFArray* a_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  friend class GGUFReader;
  [[noreturn]] void wrong_type(const char* expected) const;
  const uint8_t* element(size_t i, size_t bytes) const;

  GGUFValueType type_ = GGUFValueType::UINT8;
  size_t size_ = 0;
  std::vector<uint8_t> bytes_;     // numbers, bools: size_ x element bytes; strings: all chars
  std::vector<uint64_t> ends_;     // strings: element i is bytes_[ends_[i - 1] or 0, ends_[i])
  std::vector<GGUFArray> arrays_;  // nested arrays
};

/// One metadata value. Integers are widened to int64/uint64, floats to double; `type` keeps the
/// stored type. Arrays are a GGUFArray (element type also in `array_type`).
struct GGUFValue {
  GGUFValueType type = GGUFValueType::UINT8;
  GGUFValueType array_type = GGUFValueType::UINT8;  // only for ARRAY
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<const GGUFArray>>
      value;

  bool is_integer() const;
  bool is_float() const;
  /// Checked accessors: throw std::runtime_error naming the expected and the actual type.
  int64_t as_int() const;     // any integer type (uint64 values above INT64_MAX throw)
  double as_float() const;    // float or integer types
  bool as_bool() const;
  const std::string& as_string() const;
  const GGUFArray& array() const;
};

/// One tensor: name, dims (ne[0] fastest), type, and a pointer into the mapped file.
struct GGUFTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] first; number of elements = product
  GGMLType type = GGMLType::F32;
  uint64_t offset = 0;        // relative to the start of the data section, bytes
  uint64_t nbytes = 0;        // bytes of the tensor's data
  const uint8_t* data = nullptr;  // into the mapping; valid while the GGUFFile lives

  int64_t num_elements() const;
};

/// A memory-mapped GGUF file. Move-only; tensor data pointers stay valid while it lives.
/// open() validates everything before returning: magic, version, every metadata value and
/// tensor info within the file, known tensor types, alignment, and that each tensor's data lies
/// inside the file. Errors: ModelFileError("<path>: <problem>").
class GGUFFile {
 public:
  static GGUFFile open(const std::string& path);
  GGUFFile(GGUFFile&&) noexcept;
  GGUFFile& operator=(GGUFFile&&) noexcept;
  ~GGUFFile();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;  // general.alignment, default 32
  uint64_t data_offset() const;  // file offset of the data section (a multiple of alignment())
  uint64_t file_bytes() const;   // size of the mapped file, bytes

  /// Metadata in file order.
  const std::vector<std::pair<std::string, GGUFValue>>& metadata() const;
  const GGUFValue* find(std::string_view key) const;  // nullptr when absent
  /// Typed getters. The one-argument forms throw ModelFileError naming the key when it is
  /// absent or has the wrong type; the two-argument forms return the fallback when absent.
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, const std::string& fallback) const;
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  /// A token id (tokenizer.ggml.bos_token_id, ...) for a vocabulary of `vocab` tokens:
  /// `fallback` when absent, -1 for llama.cpp's "none" (uint32 4294967295, or -1), else the id.
  /// ModelFileError naming the key when it is not an integer or not in [0, vocab).
  int32_t get_token_id(std::string_view key, int32_t fallback, size_t vocab) const;
  /// Heap bytes held by the metadata (keys, values, arrays), for tests and memory budgets.
  size_t metadata_heap_bytes() const;

  const std::vector<GGUFTensorInfo>& tensors() const;
  const GGUFTensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  /// The tensor or ModelFileError "missing tensor <name>".
  const GGUFTensorInfo& tensor(std::string_view name) const;
  /// Whole tensor dequantized to float32, row-major with dims[0] fastest.
  std::vector<float> dequantize(const GGUFTensorInfo& t) const;

 private:
  struct Impl;
  explicit GGUFFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet
