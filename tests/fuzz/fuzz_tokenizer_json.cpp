// fuzz-layer: models
// libFuzzer harness: bytes -> tokenizer.json in a scratch directory -> Tokenizer::from_hf_dir
// (models/tokenizer_hf.cpp: bounded read, nesting depth, pipeline components, vocabulary,
// merges, post-processor), then, when it loads, encode() of a short fixed text (with and
// without special-token parsing), decode() of the ids and token_bytes() of each. The expected
// failures are ModelFileError from loading and std::runtime_error from a Split regex hitting
// PCRE2's match limit; a crash, a sanitizer report, any other exception, or an id from
// encode() outside [0, vocab_size()) is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "models/model_file_error.h"
#include "models/tokenizer.h"

namespace {

/// A directory in $TMPDIR (default /tmp) holding tokenizer.json, removed at exit.
class TempDir {
 public:
  TempDir() {
    const char* dir = std::getenv("TMPDIR");
    std::string templ = std::string(dir && *dir ? dir : "/tmp") + "/octet-fuzz-tok-XXXXXX";
    if (!mkdtemp(templ.data())) {
      std::perror("octet fuzz: mkdtemp");
      std::abort();
    }
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  /// Replaces tokenizer.json's contents with `size` bytes.
  void write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen((path_ + "/tokenizer.json").c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
      std::perror("octet fuzz: write tokenizer.json");
      std::abort();
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

constexpr const char* kText = "Hello world!  12345 <s></s><|im_start|> caf\xC3\xA9 \xE6\x97\xA5\n\t";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static TempDir dir;
  dir.write(data, size);
  std::unique_ptr<octet::Tokenizer> tok;
  try {
    tok = octet::Tokenizer::from_hf_dir(dir.path());
  } catch (const octet::ModelFileError&) {
    return 0;
  }
  for (bool parse_special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(kText, /*add_special=*/true, parse_special);
    } catch (const octet::ModelFileError&) {
      std::abort();  // loading is the only place for file errors
    } catch (const std::runtime_error&) {
      continue;  // a Split regex from the file hit PCRE2's match limit
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->vocab_size()) std::abort();
      (void)tok->token_bytes(id);
      (void)tok->is_special(id);
    }
    (void)tok->decode(ids, false);
    (void)tok->decode(ids, true);
  }
  return 0;
}
