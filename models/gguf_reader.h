#pragma once
// Bounds-checked little-endian cursor over a mapped GGUF file (internal to models/gguf*.cpp).
// Every read checks the remaining bytes first; a short read throws
// ModelFileError("<path>: truncated file: <what> of <context> at byte <pos> needs N bytes, ...").
#include <cstdint>
#include <string>
#include <utility>

#include "models/gguf.h"

namespace octet {

class GGUFReader {
 public:
  GGUFReader(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  /// What is being read, for messages ("metadata 'general.name'", "tensor 'output.weight'").
  void set_context(std::string context) { context_ = std::move(context); }

  [[noreturn]] void fail(const std::string& problem) const;

  /// Pointer to the next n bytes, or a truncation error naming `what`.
  const uint8_t* take(uint64_t n, const char* what);
  uint8_t u8(const char* what) { return *take(1, what); }
  uint16_t u16(const char* what);
  uint32_t u32(const char* what);
  uint64_t u64(const char* what);
  /// u64 length + bytes (not NUL-terminated in the file).
  std::string string(const char* what);
  /// Fails unless `count` items of at least `min_item_bytes` each fit in the remaining bytes;
  /// call before reserving memory for a count read from the file.
  void check_count(uint64_t count, uint64_t min_item_bytes, const char* what);
  /// One metadata value of the given stored type; arrays recurse (depth limited).
  GGUFValue value(uint32_t type, int depth);
  /// An array body (element type, count, elements) at nesting depth `depth` (0: a top-level
  /// value), stored compactly (GGUFArray); counts are checked against the remaining bytes.
  GGUFArray array(int depth);

  /// Bytes as a quoted string with non-printable bytes as \xNN (for messages).
  static std::string printable(const uint8_t* p, size_t n);

 private:
  std::string path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string context_;
};

}  // namespace octet
