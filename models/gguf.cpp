// GGUF reader: mmap the file, validate every byte that is read against the file size, and index
// metadata and tensors. Layout: see gguf.h and ggml's docs/gguf.md.
#include "models/gguf.h"


#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "kernels/common/host_parallel.h"
#include "models/gguf_reader.h"
#include "models/mapped_file.h"

namespace octet {

// --- GGUFValue ---------------------------------------------------------------------------------

bool GGUFValue::is_integer() const {
  switch (type) {
    case GGUFValueType::UINT8: case GGUFValueType::INT8: case GGUFValueType::UINT16:
    case GGUFValueType::INT16: case GGUFValueType::UINT32: case GGUFValueType::INT32:
    case GGUFValueType::UINT64: case GGUFValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool GGUFValue::is_float() const {
  return type == GGUFValueType::FLOAT32 || type == GGUFValueType::FLOAT64;
}

namespace {
[[noreturn]] void wrong_type(const GGUFValue& v, const char* expected) {
  throw std::runtime_error(std::string("expected ") + expected + ", got " +
                           gguf_value_type_name(v.type));
}
}  // namespace

int64_t GGUFValue::as_int() const {
  if (!is_integer()) wrong_type(*this, "an integer");
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max())) {
      throw std::runtime_error("uint64 value " + std::to_string(*u) + " does not fit in int64");
    }
    return int64_t(*u);
  }
  return std::get<int64_t>(value);
}

double GGUFValue::as_float() const {
  if (is_float()) return std::get<double>(value);
  if (is_integer()) {
    if (const auto* u = std::get_if<uint64_t>(&value)) return double(*u);
    return double(std::get<int64_t>(value));
  }
  wrong_type(*this, "a number");
}

bool GGUFValue::as_bool() const {
  if (type != GGUFValueType::BOOL) wrong_type(*this, "bool");
  return std::get<bool>(value);
}

const std::string& GGUFValue::as_string() const {
  if (type != GGUFValueType::STRING) wrong_type(*this, "string");
  return std::get<std::string>(value);
}

const std::vector<GGUFValue>& GGUFValue::as_array() const {
  if (type != GGUFValueType::ARRAY) wrong_type(*this, "array");
  return std::get<std::vector<GGUFValue>>(value);
}

int64_t GGUFTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // overflow excluded by GGUFFile::open
  return n;
}

// --- GGUFFile ----------------------------------------------------------------------------------

namespace {

// Everything open() builds; GGUFFile::Impl is this (named here so the helpers below can use it).
struct FileState {
  std::string path;
  MappedFile file;  // read-only private mapping of the whole file
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // file offset of the data section, bytes
  std::vector<std::pair<std::string, GGUFValue>> metadata;
  std::map<std::string, size_t, std::less<>> key_index;     // key -> metadata index
  std::vector<GGUFTensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;  // name -> tensors index
};

}  // namespace

struct GGUFFile::Impl : FileState {};

namespace {

void read_metadata(GGUFReader& r, FileState* impl, uint64_t n_kv) {
  impl->metadata.reserve(size_t(n_kv));  // n_kv checked against the remaining bytes
  for (uint64_t i = 0; i < n_kv; ++i) {
    r.set_context("metadata entry #" + std::to_string(i));
    std::string key = r.string("key");
    r.set_context("metadata '" + key + "'");
    if (impl->key_index.count(key) != 0) r.fail("duplicate metadata key '" + key + "'");
    const uint32_t type = r.u32("value type");
    GGUFValue value = r.value(type, 0);
    impl->key_index.emplace(key, impl->metadata.size());
    impl->metadata.emplace_back(std::move(key), std::move(value));
  }
  r.set_context("");
  const auto it = impl->key_index.find("general.alignment");
  if (it == impl->key_index.end()) return;
  const GGUFValue& v = impl->metadata[it->second].second;
  if (!v.is_integer()) {
    r.fail(std::string("general.alignment must be an integer, got ") +
           gguf_value_type_name(v.type));
  }
  const auto* s = std::get_if<int64_t>(&v.value);
  const uint64_t a = s ? uint64_t(*s) : std::get<uint64_t>(v.value);
  if ((s && *s <= 0) || a == 0 || (a & (a - 1)) != 0) {
    r.fail("general.alignment " + (s ? std::to_string(*s) : std::to_string(a)) +
           " is not a non-zero power of two");
  }
  impl->alignment = a;
}

GGUFTensorInfo read_tensor_info(GGUFReader& r, uint64_t index, uint64_t alignment) {
  GGUFTensorInfo t;
  r.set_context("tensor info #" + std::to_string(index));
  t.name = r.string("tensor name");
  r.set_context("tensor '" + t.name + "'");
  const uint32_t n_dims = r.u32("n_dims");
  if (n_dims == 0 || n_dims > 4) {
    r.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dims (must be 1 to 4)");
  }
  int64_t n = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = r.u64("dim");
    if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max())) {
      r.fail("tensor '" + t.name + "' dim " + std::to_string(d) + " is " +
             (ne == 0 ? std::string("0") : std::to_string(int64_t(ne))) + " (must be positive)");
    }
    if (__builtin_mul_overflow(n, int64_t(ne), &n)) {
      r.fail("tensor '" + t.name + "': element count overflows int64");
    }
    t.dims.push_back(int64_t(ne));
  }
  const uint32_t type = r.u32("tensor type");
  t.type = static_cast<GGMLType>(type);
  const int64_t block = ggml_block_elems(t.type);
  if (block == 0) {
    r.fail("tensor '" + t.name + "' has unsupported tensor type " + std::to_string(type));
  }
  if (t.dims[0] % block != 0) {
    r.fail("tensor '" + t.name + "': row length " + std::to_string(t.dims[0]) +
           " is not a multiple of the " + ggml_type_name(t.type) + " block size " +
           std::to_string(block));
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(n / block, ggml_block_bytes(t.type), &nbytes)) {
    r.fail("tensor '" + t.name + "': byte size overflows int64");
  }
  t.nbytes = uint64_t(nbytes);
  t.offset = r.u64("tensor data offset");
  if (t.offset % alignment != 0) {
    r.fail("tensor '" + t.name + "' data offset " + std::to_string(t.offset) +
           " is not a multiple of the alignment " + std::to_string(alignment));
  }
  return t;
}

// Places every tensor's data inside the file and checks that no two overlap.
void place_tensors(FileState* impl) {
  const std::string& path = impl->path;
  const uint64_t file_bytes = impl->file.size();
  const auto* base = impl->file.data();
  std::vector<const GGUFTensorInfo*> by_offset;
  for (GGUFTensorInfo& t : impl->tensors) {
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(impl->data_offset, t.offset, &begin) ||
        __builtin_add_overflow(begin, t.nbytes, &end) || end > file_bytes) {
      throw ModelFileError(path, "truncated file: tensor '" + t.name + "' data (" +
                                     std::to_string(t.nbytes) + " bytes at data offset " +
                                     std::to_string(t.offset) + ") runs past the end of the file (" +
                                     std::to_string(file_bytes) + " bytes)");
    }
    t.data = base + begin;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GGUFTensorInfo& a = *by_offset[i - 1];
    const GGUFTensorInfo& b = *by_offset[i];
    if (a.offset + a.nbytes > b.offset) {
      throw ModelFileError(path, "tensors '" + a.name + "' and '" + b.name + "' overlap");
    }
  }
}

}  // namespace

GGUFFile GGUFFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = MappedFile::open(path, "GGUF model");
  GGUFReader r(path, impl->file.data(), impl->file.size());

  r.set_context("header");
  const uint8_t* magic = r.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    r.fail("not a GGUF file (magic is " + GGUFReader::printable(magic, 4) + ", expected \"GGUF\")");
  }
  impl->version = r.u32("version");
  if (impl->version != 2 && impl->version != 3) {
    std::string hint = impl->version >= 0x01000000u ? " (a big-endian file?)" : "";
    r.fail("unsupported GGUF version " + std::to_string(impl->version) + hint +
           "; octet reads versions 2 and 3");
  }
  const uint64_t n_tensors = r.u64("tensor count");
  const uint64_t n_kv = r.u64("metadata count");
  // Smallest possible entries: a key/value is 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8.
  r.check_count(n_kv, 13, "metadata entries");
  read_metadata(r, impl.get(), n_kv);

  r.check_count(n_tensors, 32, "tensor infos");
  impl->tensors.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GGUFTensorInfo t = read_tensor_info(r, i, impl->alignment);
    if (impl->tensor_index.count(t.name) != 0) r.fail("duplicate tensor name '" + t.name + "'");
    impl->tensor_index.emplace(t.name, impl->tensors.size());
    impl->tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment (power of two, checked).
  const uint64_t a = impl->alignment;
  if (__builtin_add_overflow(r.pos(), a - 1, &impl->data_offset)) {
    r.fail("general.alignment " + std::to_string(a) + " is too large");
  }
  impl->data_offset &= ~(a - 1);
  place_tensors(impl.get());
  return GGUFFile(std::move(impl));
}

GGUFFile::GGUFFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GGUFFile::GGUFFile(GGUFFile&&) noexcept = default;
GGUFFile& GGUFFile::operator=(GGUFFile&&) noexcept = default;
GGUFFile::~GGUFFile() = default;

const std::string& GGUFFile::path() const { return impl_->path; }
uint32_t GGUFFile::version() const { return impl_->version; }
uint64_t GGUFFile::alignment() const { return impl_->alignment; }
uint64_t GGUFFile::data_offset() const { return impl_->data_offset; }
uint64_t GGUFFile::file_bytes() const { return impl_->file.size(); }

const std::vector<std::pair<std::string, GGUFValue>>& GGUFFile::metadata() const {
  return impl_->metadata;
}

const GGUFValue* GGUFFile::find(std::string_view key) const {
  const auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].second;
}

const std::vector<GGUFTensorInfo>& GGUFFile::tensors() const { return impl_->tensors; }

const GGUFTensorInfo* GGUFFile::find_tensor(std::string_view name) const {
  const auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const GGUFTensorInfo& GGUFFile::tensor(std::string_view name) const {
  const GGUFTensorInfo* t = find_tensor(name);
  if (t == nullptr) throw ModelFileError(impl_->path, "missing tensor " + std::string(name));
  return *t;
}

std::vector<float> GGUFFile::dequantize(const GGUFTensorInfo& t) const {
  if (!ggml_can_dequantize(t.type)) {
    throw ModelFileError(impl_->path, "tensor '" + t.name + "' has type " +
                                          ggml_type_name(t.type) +
                                          ", which octet cannot dequantize");
  }
  const int64_t n = t.num_elements();
  const int64_t row = t.dims.empty() ? n : t.dims[0];
  const int64_t n_rows = n / row;
  const int64_t row_bytes = row / ggml_block_elems(t.type) * ggml_block_bytes(t.type);
  std::vector<float> out(static_cast<size_t>(n));
  host_parallel_for(n_rows, n >= (int64_t(1) << 20), [&](int64_t i) {
    dequantize_row(t.type, t.data + i * row_bytes, out.data() + i * row, row);
  });
  return out;
}

}  // namespace octet
