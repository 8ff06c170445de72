// fuzz-layer: models
// libFuzzer harness: bytes -> a temporary file -> GGUFFile::open (models/gguf.h: mmap, header,
// metadata, tensor infos, placement), the typed metadata getters on the keys a loader reads,
// GGUFArray's typed reads of each array's first and last element, get_token_id on the
// tokenizer's id keys, and dequantize() of every tensor of at most 64 Ki elements. The expected
// failure is ModelFileError from open() and from the getters (std::runtime_error from the
// checked accessors); a crash, a sanitizer report, an array holding more than 16x the file's
// bytes or any other exception is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_temp_file.h"
#include "models/gguf.h"

namespace {

// Reads a key with each getter; the wrong-type and missing-key failures are expected.
template <typename Get>
void try_get(Get get) {
  try {
    get();
  } catch (const std::runtime_error&) {  // ModelFileError, or a checked accessor's error
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static octet::fuzz::TempFile file("gguf");
  file.write(data, size);
  try {
    const octet::GGUFFile f = octet::GGUFFile::open(file.path());
    for (const char* key : {"general.architecture", "general.name", "tokenizer.ggml.model",
                            "llama.context_length", "llama.rope.freq_base",
                            "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                            "tokenizer.ggml.token_type", "tokenizer.chat_template"}) {
      try_get([&] { (void)f.get_string(key); });
      try_get([&] { (void)f.get_int(key); });
      try_get([&] { (void)f.get_float(key); });
      try_get([&] { (void)f.get_bool(key, false); });
      try_get([&] { (void)f.get_string_array(key); });
      try_get([&] { (void)f.get_float_array(key); });
      try_get([&] { (void)f.get_int_array(key); });
    }
    for (const auto& kv : f.metadata()) {
      try_get([&] { (void)kv.second.as_int(); });
      try_get([&] { (void)kv.second.as_float(); });
      if (kv.second.type != octet::GGUFValueType::ARRAY) continue;
      const octet::GGUFArray& a = kv.second.array();
      for (size_t i : {size_t(0), a.size() - 1}) {
        if (i >= a.size()) continue;
        try_get([&] { (void)a.int_at(i); });
        try_get([&] { (void)a.float_at(i); });
        try_get([&] { (void)a.bool_at(i); });
        try_get([&] { (void)a.string_at(i); });
        try_get([&] { (void)a.array_at(i); });
        (void)a[i];
      }
      if (a.heap_bytes() > 16 * f.file_bytes() + 4096) std::abort();  // ~ its size in the file
    }
    size_t vocab = 0;
    if (const octet::GGUFValue* t = f.find("tokenizer.ggml.tokens");
        t && t->type == octet::GGUFValueType::ARRAY)
      vocab = t->array().size();
    for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
      try_get([&] { (void)f.get_token_id(key, -1, vocab); });
    for (const octet::GGUFTensorInfo& t : f.tensors()) {
      if (t.num_elements() > (int64_t(1) << 16) || !octet::ggml_can_dequantize(t.type)) continue;
      const std::vector<float> v = f.dequantize(t);
      if (int64_t(v.size()) != t.num_elements()) std::abort();
    }
  } catch (const octet::ModelFileError&) {
  }
  return 0;
}
