// safetensors reader: mmap the file, validate the JSON header, hand out TensorViews.
// Format: https://huggingface.co/docs/safetensors/index#format (see models/checkpoint.h).
// What is checked (each failure is ModelFileError(path, problem naming the tensor or key)):
//   header length: 8 bytes present, N <= kMaxHeaderBytes, N <= file size - 8;
//   header: a JSON object nested at most 3 deep; "__metadata__" an object of strings; every
//   other entry an object with a known "dtype", "shape" of non-negative integers and
//   "data_offsets" [begin, end],
//   begin <= end <= data size, (end - begin) == product(shape) x dtype size; no two tensors'
//   byte ranges overlap. Gaps between tensors are allowed (the Rust crate rejects them).

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "kernels/common/fp8.h"
#include "kernels/common/half.h"
#include "models/checkpoint.h"
#include "models/config_json.h"
#include "models/mapped_file.h"

namespace octet {

namespace {

// The Rust crate caps the header at 100 MB; a real one is a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeInfo {
  TensorDType dtype;
  const char* name;
  int64_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {TensorDType::F64, "F64", 8},         {TensorDType::F32, "F32", 4},         {TensorDType::F16, "F16", 2},
    {TensorDType::BF16, "BF16", 2},       {TensorDType::F8_E4M3, "F8_E4M3", 1}, {TensorDType::F8_E5M2, "F8_E5M2", 1},
    {TensorDType::I64, "I64", 8},         {TensorDType::I32, "I32", 4},         {TensorDType::I16, "I16", 2},
    {TensorDType::I8, "I8", 1},           {TensorDType::U8, "U8", 1},           {TensorDType::BOOL, "BOOL", 1},
};

const DTypeInfo* find_dtype(const std::string& name) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

}  // namespace

const char* dtype_name(TensorDType d) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == d) return i.name;
  return "?";
}

int64_t dtype_size(TensorDType d) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == d) return i.size;
  return 0;
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> TensorView::to_f32() const {
  const size_t n = size_t(num_elements());
  std::vector<float> out(n);
  switch (dtype) {
    case TensorDType::F32:
      if (n != 0) std::memcpy(out.data(), data, n * 4);  // an empty vector's data() may be null
      break;
    case TensorDType::F64:
      for (size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, data + 8 * i, 8);
        out[i] = float(v);
      }
      break;
    case TensorDType::F16:
    case TensorDType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        out[i] = dtype == TensorDType::F16 ? fp16_to_float(v) : bf16_to_float(v);
      }
      break;
    case TensorDType::F8_E4M3:
      for (size_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_float(data[i]);
      break;
    case TensorDType::F8_E5M2:
      for (size_t i = 0; i < n; ++i) out[i] = fp8_e5m2_to_float(data[i]);
      break;
    default:
      throw ModelFileError(file, "tensor " + name + " has dtype " + dtype_name(dtype) +
                                     ", expected a float type");
  }
  return out;
}

struct SafetensorsFile::Impl {
  std::string path;
  MappedFile file;
  std::vector<TensorView> tensors;  // sorted by name
  std::unordered_map<std::string, size_t> by_name;
  std::map<std::string, std::string> metadata;

  /// Parses and validates the header; fills tensors, by_name and metadata.
  void parse_header(const uint8_t* base, uint64_t file_bytes);
};

void SafetensorsFile::Impl::parse_header(const uint8_t* base, uint64_t file_bytes) {
  Impl& impl = *this;
  auto fail = [&](const std::string& problem) { throw ModelFileError(impl.path, problem); };
  if (file_bytes < 8)
    fail("file is " + std::to_string(file_bytes) + " bytes, too short for the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | base[i];  // little-endian
  if (header_bytes > kMaxHeaderBytes)
    fail("header length " + std::to_string(header_bytes) + " exceeds the " +
         std::to_string(kMaxHeaderBytes) + "-byte limit (corrupt or not a safetensors file)");
  if (header_bytes > file_bytes - 8)
    fail("header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
         std::to_string(file_bytes) + " bytes)");
  const uint8_t* data = base + 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;

  // Depth 3 is {"name": {"shape": [...]}}: deeper nesting is an error before it costs memory.
  const auto header = parse_model_json(impl.path, reinterpret_cast<const char*>(base + 8),
                                       reinterpret_cast<const char*>(data), 3);
  if (!header.is_object()) fail("header is not a JSON object");

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail("__metadata__." + k + " is not a string");
        impl.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor " + name;
    if (!entry.is_object()) fail(t + ": entry is not an object");
    const auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) fail(t + ": missing or non-string dtype");
    const DTypeInfo* info = find_dtype(dt->get<std::string>());
    if (!info) fail(t + ": unknown dtype '" + dt->get<std::string>() + "'");
    const auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) fail(t + ": missing or non-array shape");
    const auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 ||
        !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      fail(t + ": data_offsets must be [begin, end] of non-negative integers");

    TensorView v;
    v.name = name;
    v.dtype = info->dtype;
    v.file = impl.path;
    uint64_t elems = 1;
    bool overflow = false;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) fail(t + ": shape entries must be non-negative integers");
      const uint64_t x = d.get<uint64_t>();
      if (x > uint64_t(INT64_MAX) || (x != 0 && elems > uint64_t(INT64_MAX) / x)) overflow = true;
      else elems *= x;
      v.shape.push_back(int64_t(std::min<uint64_t>(x, uint64_t(INT64_MAX))));
    }
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end) fail(t + ": data_offsets begin " + std::to_string(begin) + " > end " +
                          std::to_string(end));
    if (end > data_bytes)
      fail(t + ": data_offsets end " + std::to_string(end) + " is past the end of the data (" +
           std::to_string(data_bytes) + " bytes)");
    if (overflow || elems > uint64_t(INT64_MAX) / uint64_t(info->size) ||
        elems * uint64_t(info->size) != end - begin) {
      std::string shape;
      for (int64_t d : v.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      fail(t + ": shape [" + shape + "] x " + info->name + " (" + std::to_string(info->size) +
           " bytes) does not match data_offsets span " + std::to_string(end - begin) + " bytes");
    }
    v.data = data + begin;
    v.nbytes = end - begin;
    impl.tensors.push_back(std::move(v));
  }

  // Overlaps: sort by begin; each range must end before the next begins (empty ones are fine).
  std::vector<const TensorView*> by_offset;
  for (const TensorView& v : impl.tensors) by_offset.push_back(&v);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  const TensorView* prev = nullptr;
  for (const TensorView* v : by_offset) {
    if (v->nbytes == 0) continue;
    if (prev && prev->data + prev->nbytes > v->data)
      fail("tensors " + prev->name + " and " + v->name + " overlap in data_offsets");
    prev = v;
  }
  for (size_t i = 0; i < impl.tensors.size(); ++i) impl.by_name[impl.tensors[i].name] = i;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = MappedFile::open(path, "safetensors file");
  impl->parse_header(impl->file.data(), impl->file.size());
  return SafetensorsFile(std::move(impl));
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

const std::string& SafetensorsFile::path() const { return impl_->path; }
const std::vector<TensorView>& SafetensorsFile::tensors() const { return impl_->tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  const auto it = impl_->by_name.find(std::string(name));
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

}  // namespace octet
