#pragma once
// Test helper: the paths of the real models the engine tests run. A missing model exits 77,
// which CTest reports as skipped (never as passed).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace octet::testing {

/// The folder of the test models: $OCTET_TEST_MODELS_DIR when set (scripts/gpu_check carries
/// them in .gpu-check/models), else ../shared/models beside the checkout.
inline std::string models_dir() {
  const char* env = std::getenv("OCTET_TEST_MODELS_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(OCTET_TEST_MODELS_DIR);
}

/// stories260K.gguf in models_dir().
inline std::string stories() {
  const std::string path = models_dir() + "/stories260K.gguf";
  if (!std::ifstream(path)) {
    std::fprintf(stderr, "SKIP: %s not found\n", path.c_str());
    std::exit(77);
  }
  return path;
}

/// SmolLM2-135M-Instruct's GGUF, fetched by scripts/setup.sh (OCTET_SMOLLM2_GGUF).
inline std::string smollm2() {
  const std::string path = OCTET_SMOLLM2_GGUF;
  if (path.empty() || !std::ifstream(path)) {
    std::fprintf(stderr, "SKIP: SmolLM2 GGUF not found (run scripts/setup.sh)\n");
    std::exit(77);
  }
  return path;
}

}  // namespace octet::testing
