// `octet kv-report --text` reads a bounded prefix of the text (enough for --max-tokens, never
// more than kMaxPromptsFileBytes): a huge --max-tokens no longer sizes a buffer (the old command
// allocated max_tokens x 64 bytes and died "out of memory"), and a device such as /dev/zero is
// refused with one line naming the flag.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "gguf_writer.h"

namespace {

const std::string kStories = std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf";

// `octet kv-report --model stories260K.gguf ARGS`.
octet::testing::RunResult kv_report(const std::string& args) {
  return octet::testing::run_octet("kv-report --model " + kStories + " " + args);
}

}  // namespace

TEST_CASE("kv-report --text: a huge --max-tokens reads a bounded prefix", "[cli]") {
  octet::testing::TempDir dir;
  const std::string text = dir.file("text.txt");
  {
    std::ofstream out(text);
    for (int i = 0; i < 10; ++i) out << "The cat sat on the mat and looked at the birds. ";
  }
  const octet::testing::RunResult r =
      octet::testing::run_octet("kv-report --model " + kStories + " --text " + text +
                                " --max-tokens 1000000000000000 --formats fp8_e4m3 --sources unit"
                                " --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("\"format\":\"fp8_e4m3\""));
}

TEST_CASE("kv-report --text: a device or directory is refused, not read", "[cli]") {
  for (const std::string& path : {std::string("/dev/zero"), std::string("/tmp")}) {
    const octet::testing::RunResult r =
        octet::testing::run_octet("kv-report --model " + kStories + " --text " + path);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("--text '" + path + "': not a readable regular file"));
  }
}

TEST_CASE("kv-report --builtin-text and --kv-cache-dtype-skip-layers", "[cli]") {
  // The built-in calibration text stands in for --text; giving both, or neither, is refused.
  octet::testing::RunResult r =
      kv_report("--builtin-text --max-tokens 48 --formats fp8_e4m3 --sources unit --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("\"tokens\":48"));
  CHECK_THAT(r.output, Catch::Contains("\"layer_window\":[0,0,0,0,0]"));
  r = kv_report("--builtin-text --text /usr/share/common-licenses/GPL-3");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--text and --builtin-text"));
  r = kv_report("");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--builtin-text"));
  // The serve flag's spelling, checked before the model loads; layer 1 of stories260K's 5 kept
  // in bf16 makes a second row.
  r = kv_report("--builtin-text --kv-cache-dtype-skip-layers windows");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--kv-cache-dtype-skip-layers 'windows'"));
  r = kv_report(
      "--builtin-text --max-tokens 48 --formats fp8_e4m3 --sources unit"
      " --kv-cache-dtype-skip-layers 1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("unit skip=1"));
  CHECK_THAT(r.output, Catch::Contains("(layers 1 in bf16)"));
  // No window layer: sliding_window selects nothing, which is an error rather than a copy of
  // the unskipped row.
  r = kv_report(
      "--builtin-text --max-tokens 48 --formats fp8_e4m3 --sources unit"
      " --kv-cache-dtype-skip-layers sliding_window");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("selects no layer"));
}
