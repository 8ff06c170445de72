// fuzz-layer: models
// libFuzzer harness: bytes -> a temporary file -> SafetensorsFile::open (models/checkpoint.h:
// mmap, header length, JSON header, dtypes, shapes against offsets, overlaps), then find() and
// to_f32() of every float tensor of at most 64 Ki elements. The expected failure is
// ModelFileError; a crash, a sanitizer report or any other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_temp_file.h"
#include "models/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static octet::fuzz::TempFile file("safetensors");
  file.write(data, size);
  try {
    const octet::SafetensorsFile f = octet::SafetensorsFile::open(file.path());
    for (const octet::TensorView& t : f.tensors()) {
      if (f.find(t.name) != &t) std::abort();  // the name index must find each tensor
      if (t.num_elements() > (int64_t(1) << 16)) continue;
      try {
        const std::vector<float> v = t.to_f32();
        if (int64_t(v.size()) != t.num_elements()) std::abort();
      } catch (const octet::ModelFileError&) {  // integer dtypes: expected
      }
    }
    volatile size_t sink = f.metadata().size();
    (void)sink;
  } catch (const octet::ModelFileError&) {
  }
  return 0;
}
