// GGUFFile's typed metadata getters. A missing key or a value of the wrong type is a
// ModelFileError("<path>: metadata '<key>': <problem>").
#include <stdexcept>

#include "models/gguf.h"

namespace octet {
namespace {

// Looks up `key`; throws "missing metadata key" when absent.
const GGUFValue& require(const GGUFFile& f, std::string_view key) {
  const GGUFValue* v = f.find(key);
  if (v == nullptr) throw ModelFileError(f.path(), "missing metadata key '" + std::string(key) + "'");
  return *v;
}

// Runs `get` on the value, turning GGUFValue's type errors into a ModelFileError naming the key.
template <typename Get>
auto checked(const GGUFFile& f, std::string_view key, const GGUFValue& v, Get get) {
  try {
    return get(v);
  } catch (const ModelFileError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw ModelFileError(f.path(), "metadata '" + std::string(key) + "': " + e.what());
  }
}

// The array at `key` (ModelFileError when absent or not an array), converted element by element
// with `convert(array, i)`; GGUFArray's type errors name the key.
template <typename T, typename Convert>
std::vector<T> get_array(const GGUFFile& f, std::string_view key, Convert convert) {
  const GGUFValue& v = require(f, key);
  return checked(f, key, v, [&](const GGUFValue& value) {
    const GGUFArray& a = value.array();
    std::vector<T> out;
    out.reserve(a.size());
    for (size_t i = 0; i < a.size(); ++i) out.push_back(convert(a, i));
    return out;
  });
}

}  // namespace

std::string GGUFFile::get_string(std::string_view key) const {
  return checked(*this, key, require(*this, key), [](const GGUFValue& v) { return v.as_string(); });
}

std::string GGUFFile::get_string(std::string_view key, const std::string& fallback) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return fallback;
  return checked(*this, key, *v, [](const GGUFValue& x) { return x.as_string(); });
}

int64_t GGUFFile::get_int(std::string_view key) const {
  return checked(*this, key, require(*this, key), [](const GGUFValue& v) { return v.as_int(); });
}

int64_t GGUFFile::get_int(std::string_view key, int64_t fallback) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return fallback;
  return checked(*this, key, *v, [](const GGUFValue& x) { return x.as_int(); });
}

double GGUFFile::get_float(std::string_view key) const {
  return checked(*this, key, require(*this, key), [](const GGUFValue& v) { return v.as_float(); });
}

double GGUFFile::get_float(std::string_view key, double fallback) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return fallback;
  return checked(*this, key, *v, [](const GGUFValue& x) { return x.as_float(); });
}

bool GGUFFile::get_bool(std::string_view key, bool fallback) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return fallback;
  return checked(*this, key, *v, [](const GGUFValue& x) { return x.as_bool(); });
}

std::vector<std::string> GGUFFile::get_string_array(std::string_view key) const {
  return get_array<std::string>(
      *this, key, [](const GGUFArray& a, size_t i) { return std::string(a.string_at(i)); });
}

std::vector<float> GGUFFile::get_float_array(std::string_view key) const {
  return get_array<float>(*this, key,
                          [](const GGUFArray& a, size_t i) { return float(a.float_at(i)); });
}

std::vector<int64_t> GGUFFile::get_int_array(std::string_view key) const {
  return get_array<int64_t>(*this, key, [](const GGUFArray& a, size_t i) { return a.int_at(i); });
}

int32_t GGUFFile::get_token_id(std::string_view key, int32_t fallback, size_t vocab) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return fallback;
  const std::string k(key);
  if (!v->is_integer())
    throw ModelFileError(path(), "metadata '" + k + "': expected an integer token id, got " +
                                     gguf_value_type_name(v->type));
  // llama.cpp's "no such token": uint32 0xFFFFFFFF (LLAMA_TOKEN_NULL written unsigned) or -1.
  const auto* u = std::get_if<uint64_t>(&v->value);
  const auto* s = std::get_if<int64_t>(&v->value);
  if ((u && *u == 0xFFFFFFFFu) || (s && *s == -1)) return -1;
  if ((u && *u >= vocab) || (s && (*s < 0 || uint64_t(*s) >= vocab)))
    throw ModelFileError(path(), "metadata '" + k + "' is " +
                                     (u ? std::to_string(*u) : std::to_string(*s)) +
                                     ", not a token id of this vocabulary (" +
                                     std::to_string(vocab) + " tokens, ids 0.." +
                                     std::to_string(vocab == 0 ? 0 : vocab - 1) + ")");
  return int32_t(u ? int64_t(*u) : *s);
}

}  // namespace octet
