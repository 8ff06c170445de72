// Bounds-checked reads of GGUF primitives and metadata values.
#include "models/gguf_reader.h"

#include <cstring>
#include <memory>

namespace octet {
namespace {

constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are rejected (stack safety)

// Smallest encoded size of one value of a type (strings: the u64 length; arrays: type + count).
uint64_t min_value_bytes(uint32_t type) {
  switch (static_cast<GGUFValueType>(type)) {
    case GGUFValueType::UINT8: case GGUFValueType::INT8: case GGUFValueType::BOOL: return 1;
    case GGUFValueType::UINT16: case GGUFValueType::INT16: return 2;
    case GGUFValueType::UINT32: case GGUFValueType::INT32: case GGUFValueType::FLOAT32: return 4;
    case GGUFValueType::UINT64: case GGUFValueType::INT64: case GGUFValueType::FLOAT64: return 8;
    case GGUFValueType::STRING: return 8;
    case GGUFValueType::ARRAY: return 12;
  }
  return 0;  // unknown type
}

}  // namespace

const char* gguf_value_type_name(GGUFValueType type) {
  switch (type) {
    case GGUFValueType::UINT8: return "uint8";
    case GGUFValueType::INT8: return "int8";
    case GGUFValueType::UINT16: return "uint16";
    case GGUFValueType::INT16: return "int16";
    case GGUFValueType::UINT32: return "uint32";
    case GGUFValueType::INT32: return "int32";
    case GGUFValueType::FLOAT32: return "float32";
    case GGUFValueType::BOOL: return "bool";
    case GGUFValueType::STRING: return "string";
    case GGUFValueType::ARRAY: return "array";
    case GGUFValueType::UINT64: return "uint64";
    case GGUFValueType::INT64: return "int64";
    case GGUFValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

void GGUFReader::fail(const std::string& problem) const { throw ModelFileError(path_, problem); }

const uint8_t* GGUFReader::take(uint64_t n, const char* what) {
  if (n > remaining()) {
    fail("truncated file: " + std::string(what) + (context_.empty() ? "" : " of " + context_) +
         " at byte " + std::to_string(pos_) + " needs " + std::to_string(n) +
         " bytes, but the file has " + std::to_string(remaining()) + " left (" +
         std::to_string(size_) + " bytes in all)");
  }
  const uint8_t* p = data_ + pos_;
  pos_ += n;
  return p;
}

uint16_t GGUFReader::u16(const char* what) {
  const uint8_t* p = take(2, what);
  return uint16_t(p[0] | (p[1] << 8));
}

uint32_t GGUFReader::u32(const char* what) {
  const uint8_t* p = take(4, what);
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

uint64_t GGUFReader::u64(const char* what) {
  const uint8_t* p = take(8, what);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string GGUFReader::string(const char* what) {
  const uint64_t n = u64(what);
  const uint8_t* p = take(n, what);  // checked before any allocation
  return std::string(reinterpret_cast<const char*>(p), size_t(n));
}

void GGUFReader::check_count(uint64_t count, uint64_t min_item_bytes, const char* what) {
  if (count > remaining() / min_item_bytes) {
    fail("truncated or corrupt file: " + std::to_string(count) + " " + what +
         (context_.empty() ? "" : " in " + context_) + " at byte " + std::to_string(pos_) +
         " need at least " + std::to_string(min_item_bytes) + " bytes each, but the file has " +
         std::to_string(remaining()) + " left");
  }
}

GGUFValue GGUFReader::value(uint32_t type, int depth) {
  if (min_value_bytes(type) == 0) {
    fail("unknown metadata value type " + std::to_string(type) +
         (context_.empty() ? "" : " in " + context_));
  }
  GGUFValue v;
  v.type = static_cast<GGUFValueType>(type);
  switch (v.type) {
    case GGUFValueType::UINT8: v.value = uint64_t(u8("uint8 value")); break;
    case GGUFValueType::INT8: v.value = int64_t(int8_t(u8("int8 value"))); break;
    case GGUFValueType::UINT16: v.value = uint64_t(u16("uint16 value")); break;
    case GGUFValueType::INT16: v.value = int64_t(int16_t(u16("int16 value"))); break;
    case GGUFValueType::UINT32: v.value = uint64_t(u32("uint32 value")); break;
    case GGUFValueType::INT32: v.value = int64_t(int32_t(u32("int32 value"))); break;
    case GGUFValueType::UINT64: v.value = u64("uint64 value"); break;
    case GGUFValueType::INT64: v.value = int64_t(u64("int64 value")); break;
    case GGUFValueType::FLOAT32: {
      const uint32_t bits = u32("float32 value");
      float f;
      std::memcpy(&f, &bits, 4);
      v.value = double(f);
      break;
    }
    case GGUFValueType::FLOAT64: {
      const uint64_t bits = u64("float64 value");
      double d;
      std::memcpy(&d, &bits, 8);
      v.value = d;
      break;
    }
    case GGUFValueType::BOOL: {
      const uint8_t b = u8("bool value");
      if (b > 1) {
        fail("bool value " + std::to_string(b) + " (must be 0 or 1)" +
             (context_.empty() ? "" : " in " + context_));
      }
      v.value = b == 1;
      break;
    }
    case GGUFValueType::STRING: v.value = string("string value"); break;
    case GGUFValueType::ARRAY: {
      auto a = std::make_shared<GGUFArray>(array(depth));
      v.array_type = a->type();
      v.value = std::shared_ptr<const GGUFArray>(std::move(a));
      break;
    }
  }
  return v;
}

GGUFArray GGUFReader::array(int depth) {
  const std::string in = context_.empty() ? "" : " in " + context_;
  if (depth >= kMaxArrayDepth)
    fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + in);
  const uint32_t elem_type = u32("array element type");
  const uint64_t elem_bytes = min_value_bytes(elem_type);
  if (elem_bytes == 0) fail("unknown array element type " + std::to_string(elem_type) + in);
  const uint64_t count = u64("array length");
  check_count(count, elem_bytes, "array elements");  // so count * elem_bytes <= remaining()
  GGUFArray a;
  a.type_ = static_cast<GGUFValueType>(elem_type);
  a.size_ = size_t(count);
  switch (a.type_) {
    case GGUFValueType::STRING: {
      a.ends_.reserve(a.size_);
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t n = u64("string length");
        const uint8_t* p = take(n, "string value");  // n <= the bytes left in the file
        a.bytes_.insert(a.bytes_.end(), p, p + n);
        a.ends_.push_back(a.bytes_.size());
      }
      a.bytes_.shrink_to_fit();
      break;
    }
    case GGUFValueType::ARRAY:
      a.arrays_.reserve(a.size_);
      for (uint64_t i = 0; i < count; ++i) a.arrays_.push_back(array(depth + 1));
      break;
    default: {  // numbers and bools: their bytes as stored
      const uint8_t* p = take(count * elem_bytes, "array elements");
      if (a.type_ == GGUFValueType::BOOL) {
        for (uint64_t i = 0; i < count; ++i) {
          if (p[i] > 1) {
            fail("bool value " + std::to_string(p[i]) + " (must be 0 or 1) at element " +
                 std::to_string(i) + in);
          }
        }
      }
      a.bytes_.assign(p, p + count * elem_bytes);
      break;
    }
  }
  return a;
}

std::string GGUFReader::printable(const uint8_t* p, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string s = "\"";
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\') {
      s += char(p[i]);
    } else {
      s += "\\x";
      s += hex[p[i] >> 4];
      s += hex[p[i] & 0xF];
    }
  }
  return s + "\"";
}

}  // namespace octet
