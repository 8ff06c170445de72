// GGUF reader: mmap the file, validate every byte that is read against the file size, and index
// metadata and tensors. Layout: see gguf.h and ggml's docs/gguf.md.
#include "models/gguf.h"


#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "kernels/common/host_parallel.h"
#include "models/gguf_reader.h"
#include "models/mapped_file.h"

namespace octet {

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
  std::vector<uint32_t> key_index;     // metadata indices sorted by key (4 bytes per key)
  std::vector<GGUFTensorInfo> tensors;
  std::vector<uint32_t> tensor_index;  // tensors indices sorted by name
};

// Sorted indices of `items` by name(item); the first duplicate name fails through `dup`.
template <typename T, typename Name, typename Dup>
std::vector<uint32_t> sorted_index(const std::vector<T>& items, Name name, Dup dup) {
  std::vector<uint32_t> index(items.size());
  for (size_t i = 0; i < index.size(); ++i) index[i] = uint32_t(i);
  std::stable_sort(index.begin(), index.end(), [&](uint32_t a, uint32_t b) {
    return name(items[a]) < name(items[b]);
  });
  for (size_t i = 1; i < index.size(); ++i)
    if (name(items[index[i - 1]]) == name(items[index[i]])) dup(name(items[index[i]]));
  return index;
}

// The position of `key` in a sorted_index, or nullptr.
template <typename T, typename Name>
const T* find_sorted(const std::vector<T>& items, const std::vector<uint32_t>& index,
                     std::string_view key, Name name) {
  const auto it = std::lower_bound(index.begin(), index.end(), key,
                                   [&](uint32_t i, std::string_view k) {
                                     return std::string_view(name(items[i])) < k;
                                   });
  if (it == index.end() || name(items[*it]) != key) return nullptr;
  return &items[*it];
}

const std::string& key_of(const std::pair<std::string, GGUFValue>& kv) { return kv.first; }
const std::string& name_of(const GGUFTensorInfo& t) { return t.name; }

}  // namespace

struct GGUFFile::Impl : FileState {};

namespace {

void read_metadata(GGUFReader& r, FileState* impl, uint64_t n_kv) {
  impl->metadata.reserve(size_t(n_kv));  // n_kv checked against the remaining bytes
  for (uint64_t i = 0; i < n_kv; ++i) {
    r.set_context("metadata entry #" + std::to_string(i));
    std::string key = r.string("key");
    r.set_context("metadata '" + key + "'");
    const uint32_t type = r.u32("value type");
    GGUFValue value = r.value(type, 0);
    impl->metadata.emplace_back(std::move(key), std::move(value));
  }
  r.set_context("");
  impl->key_index = sorted_index(impl->metadata, key_of, [&](const std::string& key) {
    r.fail("duplicate metadata key '" + key + "'");
  });
  const auto* kv = find_sorted(impl->metadata, impl->key_index, "general.alignment", key_of);
  if (kv == nullptr) return;
  const GGUFValue& v = kv->second;
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
  if (n_kv > UINT32_MAX) r.fail("more than 2^32 metadata entries");  // the index is uint32
  read_metadata(r, impl.get(), n_kv);

  r.check_count(n_tensors, 32, "tensor infos");
  if (n_tensors > UINT32_MAX) r.fail("more than 2^32 tensors");  // the index is uint32
  impl->tensors.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    impl->tensors.push_back(read_tensor_info(r, i, impl->alignment));
  }
  r.set_context("");
  impl->tensor_index = sorted_index(impl->tensors, name_of, [&](const std::string& name) {
    r.fail("duplicate tensor name '" + name + "'");
  });
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
  const auto* kv = find_sorted(impl_->metadata, impl_->key_index, key, key_of);
  return kv == nullptr ? nullptr : &kv->second;
}

size_t GGUFFile::metadata_heap_bytes() const {
  size_t n = impl_->metadata.capacity() * sizeof(impl_->metadata[0]) +
             impl_->key_index.capacity() * sizeof(uint32_t);
  for (const auto& [key, v] : impl_->metadata) {
    n += key.capacity() > 15 ? key.capacity() + 1 : 0;  // beyond the small-string buffer
    if (const auto* s = std::get_if<std::string>(&v.value))
      n += s->capacity() > 15 ? s->capacity() + 1 : 0;
    if (v.type == GGUFValueType::ARRAY) n += sizeof(GGUFArray) + v.array().heap_bytes();
  }
  return n;
}

const std::vector<GGUFTensorInfo>& GGUFFile::tensors() const { return impl_->tensors; }

const GGUFTensorInfo* GGUFFile::find_tensor(std::string_view name) const {
  return find_sorted(impl_->tensors, impl_->tensor_index, name, name_of);
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
