// `octet calibrate` and `octet kv-report` end to end: the real binary, its outputs and the exit
// codes of bad input (2 = usage error, with a one-line message).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "gguf_writer.h"

namespace {

using octet::testing::RunResult;

/// `octet ARGS`, stdout and stderr together.
RunResult run(const std::string& args) { return octet::testing::run_octet(args); }

const std::string kStories = std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf";

}  // namespace

TEST_CASE("calibrate CLI: writes a scales file that serve-side loading accepts", "[cli]") {
  octet::testing::TempDir dir;
  const std::string out = dir.file("scales.json");
  const RunResult r =
      run("calibrate --model " + kStories + " --strategy attn_head --output " + out);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["kv_cache_dtype"] == "fp8_e4m3");
  REQUIRE(j["layers"].size() == 5);
  CHECK(j["layers"]["0"]["k_scale"].size() == 4);  // stories260K: 4 KV heads
  // generate with --kv-scales-path: the start-up table is logged only by serve; here it must run.
  const RunResult g =
      run("generate --model " + kStories +
          " --prompt Once --max-tokens 4 --kv-cache-dtype fp8 --kv-scales-path " + out);
  INFO(g.output);
  CHECK(g.exit_code == 0);
}

TEST_CASE("calibrate CLI: bad input exits 2 with a clear message", "[cli]") {
  octet::testing::TempDir dir;
  {
    std::ofstream(dir.file("empty.jsonl")) << "\n";
    std::ofstream(dir.file("short.txt")) << "Once upon a time.";
  }
  const struct {
    std::string args, message;
  } cases[] = {
      {"--dataset " + dir.file("empty.jsonl") + " --output " + dir.file("o.json"), "empty dataset"},
      {"--dataset " + dir.file("short.txt") + " --output " + dir.file("o.json"),
       "shorter than one sample"},
      {"--strategy group --output " + dir.file("o.json"), "--strategy group"},
      {"--output /proc/octet-no-such-dir/o.json", "cannot write the output"},
      {"--output " + dir.file("ckpt_dir"), "needs a Hugging Face checkpoint"},
      {"--kv-cache-dtype fp8_per_token_head --output " + dir.file("o.json"),
       "needs no calibration"},
  };
  for (const auto& c : cases) {
    const RunResult r = run("calibrate --model " + kStories + " " + c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
  const RunResult g = run("generate --model " + kStories +
                          " --prompt Once --kv-cache-dtype fp8_per_token_head --kv-scales-path " +
                          dir.file("o.json"));
  CHECK(g.exit_code == 2);
  CHECK(g.output.find("cannot be used with --kv-cache-dtype fp8_per_token_head") !=
        std::string::npos);
}

TEST_CASE("kv-report CLI: --json holds every variant", "[cli]") {
  const RunResult r = run("kv-report --model " + kStories +
                          " --text /usr/share/common-licenses/GPL-3 --max-tokens 64 --json "
                          "--sources unit,per_token_head --formats fp8_e4m3");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  REQUIRE(j["variants"].size() == 2);
  CHECK(j["variants"][1]["source"] == "per_token_head");
  CHECK(j["variants"][0]["layers"].size() == 5);
  const RunResult bad = run("kv-report --model " + kStories + " --text /nonexistent");
  CHECK(bad.exit_code == 2);
}
