#pragma once
// Test helper: builds GGUF files byte by byte (independently of models/gguf.cpp) so tests can
// write valid files with every metadata type and deliberately broken ones (bad magic, wrong
// version, huge counts, misaligned offsets, duplicate keys, truncation at any byte).
// Layout written: magic, u32 version, u64 tensor count, u64 kv count, kvs, tensor infos, zero
// padding to `alignment`, tensor data (each tensor at its offset, zero-padded between).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace octet::testing {

/// Little-endian byte buffer.
struct Bytes {
  std::vector<uint8_t> b;

  Bytes& u8(uint8_t v) { b.push_back(v); return *this; }
  Bytes& u16(uint16_t v) { return le(v, 2); }
  Bytes& u32(uint32_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& i8(int8_t v) { return u8(uint8_t(v)); }
  Bytes& i16(int16_t v) { return u16(uint16_t(v)); }
  Bytes& i32(int32_t v) { return u32(uint32_t(v)); }
  Bytes& i64(int64_t v) { return u64(uint64_t(v)); }
  Bytes& f32(float v) { uint32_t x; std::memcpy(&x, &v, 4); return u32(x); }
  Bytes& f64(double v) { uint64_t x; std::memcpy(&x, &v, 8); return u64(x); }
  Bytes& str(const std::string& s) { u64(s.size()); b.insert(b.end(), s.begin(), s.end()); return *this; }
  Bytes& raw(const std::vector<uint8_t>& v) { b.insert(b.end(), v.begin(), v.end()); return *this; }
  Bytes& raw(const Bytes& v) { return raw(v.b); }
  size_t size() const { return b.size(); }

 private:
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
};

// GGUF metadata value type ids (docs/gguf.md).
enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kStr = 8,
  kArr = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

/// Encoded array value body: element type, count, then the already-encoded elements.
inline Bytes array_value(uint32_t elem_type, uint64_t count, const Bytes& elems) {
  Bytes a;
  a.u32(elem_type).u64(count).raw(elems);
  return a;
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;     // ne[0] first
  uint32_t type = 0;              // ggml type id
  std::vector<uint8_t> data;      // raw bytes written at the tensor's offset
  std::optional<uint64_t> offset; // default: next multiple of the alignment after the previous
};

/// Where things landed in the last serialized file, bytes from the start.
struct Layout {
  size_t metadata_begin = 0, tensor_infos_begin = 0, data_begin = 0, total = 0;
  std::vector<uint64_t> offsets;  // per tensor, relative to data_begin
};

class GGUFWriter {
 public:
  std::string magic = "GGUF";
  uint32_t version = 3;
  uint64_t alignment = 32;  // padding used; add "general.alignment" yourself to declare it
  std::optional<uint64_t> tensor_count_override, kv_count_override;

  /// Adds one key/value; `value` is the encoded value body (without the type id).
  GGUFWriter& kv(const std::string& key, uint32_t type, const Bytes& value) {
    kvs_.str(key).u32(type).raw(value);
    ++n_kv_;
    return *this;
  }
  GGUFWriter& kv_u32(const std::string& key, uint32_t v) { return kv(key, kU32, Bytes().u32(v)); }
  GGUFWriter& kv_str(const std::string& key, const std::string& v) {
    return kv(key, kStr, Bytes().str(v));
  }
  GGUFWriter& tensor(TensorSpec t) {
    tensors_.push_back(std::move(t));
    return *this;
  }

  std::vector<uint8_t> serialize(Layout* layout = nullptr) const {
    Layout l;
    Bytes out;
    out.raw(std::vector<uint8_t>(magic.begin(), magic.end()));
    out.u32(version);
    out.u64(tensor_count_override.value_or(tensors_.size()));
    out.u64(kv_count_override.value_or(n_kv_));
    l.metadata_begin = out.size();
    out.raw(kvs_);
    l.tensor_infos_begin = out.size();
    uint64_t next = 0;
    for (const TensorSpec& t : tensors_) {
      const uint64_t off = t.offset.value_or(next);
      l.offsets.push_back(off);
      next = round_up(off + t.data.size());
      out.str(t.name).u32(uint32_t(t.dims.size()));
      for (uint64_t d : t.dims) out.u64(d);
      out.u32(t.type).u64(off);
    }
    while (out.size() % alignment != 0) out.u8(0);
    l.data_begin = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].data.empty()) continue;  // a tensor info without data (error tests)
      const size_t at = l.data_begin + l.offsets[i];
      if (out.b.size() < at + tensors_[i].data.size()) out.b.resize(at + tensors_[i].data.size());
      std::memcpy(out.b.data() + at, tensors_[i].data.data(), tensors_[i].data.size());
    }
    while (!tensors_.empty() && out.size() % alignment != 0) out.u8(0);
    l.total = out.size();
    if (layout) *layout = l;
    return out.b;
  }

  /// Serializes to `path`; returns the layout.
  Layout write(const std::string& path) const {
    Layout l;
    write_bytes(path, serialize(&l));
    return l;
  }

  static void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }

 private:
  uint64_t round_up(uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }

  Bytes kvs_;
  uint64_t n_kv_ = 0;
  std::vector<TensorSpec> tensors_;
};

/// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("octet_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace octet::testing
