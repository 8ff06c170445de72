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

template <typename T, typename Convert>
std::vector<T> get_array(const GGUFFile& f, std::string_view key, Convert convert) {
  const GGUFValue& v = require(f, key);
  return checked(f, key, v, [&](const GGUFValue& a) {
    std::vector<T> out;
    out.reserve(a.as_array().size());
    for (const GGUFValue& item : a.as_array()) out.push_back(convert(item));
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
  return get_array<std::string>(*this, key, [](const GGUFValue& v) { return v.as_string(); });
}

std::vector<float> GGUFFile::get_float_array(std::string_view key) const {
  return get_array<float>(*this, key, [](const GGUFValue& v) { return float(v.as_float()); });
}

std::vector<int64_t> GGUFFile::get_int_array(std::string_view key) const {
  return get_array<int64_t>(*this, key, [](const GGUFValue& v) { return v.as_int(); });
}

}  // namespace octet
