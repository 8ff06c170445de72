// GGUFValue's checked accessors and GGUFArray's compact element storage (models/gguf.h).
#include <cstring>
#include <limits>
#include <stdexcept>

#include "models/gguf.h"

namespace octet {

namespace {

[[noreturn]] void wrong_type(GGUFValueType got, const char* expected) {
  throw std::runtime_error(std::string("expected ") + expected + ", got " +
                           gguf_value_type_name(got));
}

bool integer_type(GGUFValueType t) {
  switch (t) {
    case GGUFValueType::UINT8: case GGUFValueType::INT8: case GGUFValueType::UINT16:
    case GGUFValueType::INT16: case GGUFValueType::UINT32: case GGUFValueType::INT32:
    case GGUFValueType::UINT64: case GGUFValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool float_type(GGUFValueType t) {
  return t == GGUFValueType::FLOAT32 || t == GGUFValueType::FLOAT64;
}

int64_t checked_int64(uint64_t u) {
  if (u > uint64_t(std::numeric_limits<int64_t>::max()))
    throw std::runtime_error("uint64 value " + std::to_string(u) + " does not fit in int64");
  return int64_t(u);
}

uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

}  // namespace

// --- GGUFValue ---------------------------------------------------------------------------------

bool GGUFValue::is_integer() const { return integer_type(type); }

bool GGUFValue::is_float() const { return float_type(type); }

int64_t GGUFValue::as_int() const {
  if (!is_integer()) wrong_type(type, "an integer");
  if (const auto* u = std::get_if<uint64_t>(&value)) return checked_int64(*u);
  return std::get<int64_t>(value);
}

double GGUFValue::as_float() const {
  if (is_float()) return std::get<double>(value);
  if (is_integer()) {
    if (const auto* u = std::get_if<uint64_t>(&value)) return double(*u);
    return double(std::get<int64_t>(value));
  }
  wrong_type(type, "a number");
}

bool GGUFValue::as_bool() const {
  if (type != GGUFValueType::BOOL) wrong_type(type, "bool");
  return std::get<bool>(value);
}

const std::string& GGUFValue::as_string() const {
  if (type != GGUFValueType::STRING) wrong_type(type, "string");
  return std::get<std::string>(value);
}

const GGUFArray& GGUFValue::array() const {
  if (type != GGUFValueType::ARRAY) wrong_type(type, "array");
  return *std::get<std::shared_ptr<const GGUFArray>>(value);
}

// --- GGUFArray ---------------------------------------------------------------------------------

void GGUFArray::wrong_type(const char* expected) const {
  throw std::runtime_error(std::string("expected ") + expected + ", got " +
                           gguf_value_type_name(type_));
}

const uint8_t* GGUFArray::element(size_t i, size_t bytes) const {
  if (i >= size_) throw std::out_of_range("GGUFArray: index " + std::to_string(i) + " >= size " +
                                          std::to_string(size_));
  return bytes_.data() + i * bytes;
}

int64_t GGUFArray::int_at(size_t i) const {
  switch (type_) {
    case GGUFValueType::UINT8: return *element(i, 1);
    case GGUFValueType::INT8: return int8_t(*element(i, 1));
    case GGUFValueType::UINT16: return int64_t(load_le(element(i, 2), 2));
    case GGUFValueType::INT16: return int16_t(load_le(element(i, 2), 2));
    case GGUFValueType::UINT32: return int64_t(load_le(element(i, 4), 4));
    case GGUFValueType::INT32: return int32_t(load_le(element(i, 4), 4));
    case GGUFValueType::UINT64: return checked_int64(load_le(element(i, 8), 8));
    case GGUFValueType::INT64: return int64_t(load_le(element(i, 8), 8));
    default: wrong_type("an integer");
  }
}

double GGUFArray::float_at(size_t i) const {
  if (type_ == GGUFValueType::FLOAT32) {
    const auto bits = uint32_t(load_le(element(i, 4), 4));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  if (type_ == GGUFValueType::FLOAT64) {
    const uint64_t bits = load_le(element(i, 8), 8);
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (type_ == GGUFValueType::UINT64) return double(load_le(element(i, 8), 8));
  if (integer_type(type_)) return double(int_at(i));
  wrong_type("a number");
}

bool GGUFArray::bool_at(size_t i) const {
  if (type_ != GGUFValueType::BOOL) wrong_type("bool");
  return *element(i, 1) != 0;
}

std::string_view GGUFArray::string_at(size_t i) const {
  if (type_ != GGUFValueType::STRING) wrong_type("string");
  if (i >= size_) (void)element(i, 0);  // throws out_of_range
  const uint64_t begin = i == 0 ? 0 : ends_[i - 1];
  return {reinterpret_cast<const char*>(bytes_.data()) + begin, size_t(ends_[i] - begin)};
}

const GGUFArray& GGUFArray::array_at(size_t i) const {
  if (type_ != GGUFValueType::ARRAY) wrong_type("array");
  if (i >= size_) (void)element(i, 0);  // throws out_of_range
  return arrays_[i];
}

GGUFValue GGUFArray::operator[](size_t i) const {
  GGUFValue v;
  v.type = type_;
  switch (type_) {
    case GGUFValueType::UINT64: v.value = load_le(element(i, 8), 8); break;
    case GGUFValueType::UINT8: case GGUFValueType::UINT16: case GGUFValueType::UINT32:
      v.value = uint64_t(int_at(i));
      break;
    case GGUFValueType::INT8: case GGUFValueType::INT16: case GGUFValueType::INT32:
    case GGUFValueType::INT64:
      v.value = int_at(i);
      break;
    case GGUFValueType::FLOAT32: case GGUFValueType::FLOAT64: v.value = float_at(i); break;
    case GGUFValueType::BOOL: v.value = bool_at(i); break;
    case GGUFValueType::STRING: v.value = std::string(string_at(i)); break;
    case GGUFValueType::ARRAY: {
      const GGUFArray& a = array_at(i);
      v.array_type = a.type();
      v.value = std::make_shared<const GGUFArray>(a);
      break;
    }
  }
  return v;
}

GGUFValue GGUFArray::const_iterator::operator*() const { return (*a_)[i_]; }

size_t GGUFArray::heap_bytes() const {
  size_t n = bytes_.capacity() + ends_.capacity() * sizeof(uint64_t) +
             arrays_.capacity() * sizeof(GGUFArray);
  for (const GGUFArray& a : arrays_) n += a.heap_bytes();
  return n;
}

}  // namespace octet
