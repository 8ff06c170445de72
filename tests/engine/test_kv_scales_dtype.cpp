// --kv-scales-path against the cache dtype (issue 23 item 10): a scales file calibrated for
// one FP8 format on a cache of the other is a ModelFileError naming the file, the field and
// both dtypes (E4M3's range is 448, E5M2's 57344: such scales are off by 128x), on the real
// stories260K model (5 layers, 4 KV heads).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "gguf_writer.h"
#include "models/model_file_error.h"

using namespace octet;

namespace {

const LoadedModel& stories() {
  static const std::unique_ptr<LoadedModel> m =
      load_model(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf",
                 make_load_options("auto", "channel"));
  return *m;
}

std::string scales_file(const testing::TempDir& dir, const std::string& dtype_field) {
  static int n = 0;
  const std::string path = dir.file("scales" + std::to_string(n++) + ".json");
  std::ofstream(path) << "{" << dtype_field << R"("layers": {
      "0": {"k_scale": 1, "v_scale": 1}, "1": {"k_scale": 1, "v_scale": 1},
      "2": {"k_scale": 1, "v_scale": 1}, "3": {"k_scale": 1, "v_scale": 1},
      "4": {"k_scale": 1, "v_scale": 1}}})";
  return path;
}

CacheConfig cache(const std::string& dtype, const std::string& scales) {
  CacheConfig c;
  c.kv_cache_dtype = dtype;
  c.kv_cache_memory_bytes = 1 << 20;
  c.kv_scales_path = scales;
  return c;
}

}  // namespace

TEST_CASE("kv scales file: an fp8_e5m2 file on an fp8_e4m3 cache and the reverse are errors",
          "[kv][kv_scales]") {
  testing::TempDir dir;
  const std::string e5 = scales_file(dir, R"("kv_cache_dtype": "fp8_e5m2", )");
  try {
    setup_kv_cache(cache("fp8_e4m3", e5), 512, stories());
    FAIL("no error");
  } catch (const ModelFileError& e) {
    CHECK(e.path() == e5);
    CHECK_THAT(e.what(), Catch::Contains("kv_cache_dtype \"fp8_e5m2\"") &&
                             Catch::Contains("this cache is fp8_e4m3"));
  }
  const std::string e4 = scales_file(dir, R"("kv_cache_dtype": "fp8_e4m3", )");
  CHECK_THROWS_AS(setup_kv_cache(cache("fp8_e5m2", e4), 512, stories()), ModelFileError);
  CHECK_THROWS_AS(setup_kv_cache(cache("fp8", e5), 512, stories()), ModelFileError);
  // Matching dtypes, an unrecorded dtype, and a 16-bit cache (the scales are unused) load.
  CHECK(setup_kv_cache(cache("fp8_e5m2", e5), 512, stories()).layers[0].scale_source == "file");
  CHECK(setup_kv_cache(cache("fp8_e5m2", scales_file(dir, "")), 512, stories())
            .layers[0].scale_source == "file");
  CHECK_NOTHROW(setup_kv_cache(cache("bf16", e5), 512, stories()));
}
