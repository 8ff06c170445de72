// `octet plan` against hostile config.json files and flags (issue 23, item 3): hidden_size 2^62
// killed it with SIGFPE, --max-model-len near 2^63 printed negative "sequences that fit". Bad
// files are one line naming the file and field (exit 1); bad flags name the flag (exit 2).
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "bench/plan.h"
#include "cli_run.h"
#include "gguf_writer.h"

using octet::testing::run_octet;
using octet::testing::TempDir;
using Catch::Contains;
using Catch::StartsWith;

namespace {

std::string write_config(const TempDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

std::string llama_config(const std::string& hidden) {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": )" + hidden +
         R"(, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
            "vocab_size": 256})";
}

bool one_line(const std::string& s) { return s.find('\n') == s.size() - 1; }

}  // namespace

TEST_CASE("plan: a config.json with huge dimensions is a file error, not SIGFPE", "[plan]") {
  TempDir dir;
  const std::string path = write_config(dir, llama_config("4611686018427387904"));
  const auto r = run_octet("plan --model " + path + " --device h100-sxm-80gb");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains(path + ": hidden_size is 4611686018427387904"));
  CHECK(one_line(r.output));
}

TEST_CASE("plan: unreadable and malformed config.json are file errors (exit 1)", "[plan]") {
  TempDir dir;
  const std::string path = write_config(dir, "{\"hidden_size\": ");
  auto r = run_octet("plan --model " + path);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains(path + ": malformed JSON"));
  CHECK(one_line(r.output));
  std::ofstream(path) << llama_config("\"64\"");
  r = run_octet("plan --model " + path);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output,
             Contains(path + ": hidden_size must be a positive integer below 2^63, got \"64\""));
}

TEST_CASE("plan: flags beyond their caps name the flag (exit 2)", "[plan]") {
  for (const char* f : {"--max-model-len 9223372036854775000", "--batch-size 4611686018427387904",
                        "--device-memory-gib inf", "--device-memory-gib 1e300",
                        "--reserved-memory-gib inf", "--bandwidth-gbs 1e300",
                        "--bandwidth-gbs nan"}) {
    const std::string flags = f;
    const auto r = run_octet("plan --model llama-3.1-8b " + flags);
    INFO(flags << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(flags.substr(0, flags.find(' '))));
    CHECK(one_line(r.output));
  }
  // The cap itself still plans, with a non-negative count.
  const auto r = run_octet("plan --model llama-3.1-8b --max-model-len 268435456 --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  for (const auto& row : j["plans"]) CHECK(row["sequences_fit"].get<int64_t>() >= 0);
}

TEST_CASE("make_plan checks its products for overflow", "[plan]") {
  octet::bench::PlanInputs in;
  in.model = *octet::bench::model_preset("llama-3.1-8b");
  in.device = *octet::bench::device_preset("h100-sxm-80gb");
  in.max_model_len = int64_t{1} << 62;  // a caller that skipped PlanConfig::validate
  CHECK_THROWS_WITH(octet::bench::make_plan(in), Contains("overflows 64-bit arithmetic"));
  in.max_model_len = 1024;
  in.model.hidden_size = int64_t{1} << 62;  // a shape that skipped ModelConfig::validate
  CHECK_THROWS_WITH(octet::bench::make_plan(in), Contains("parameter count overflows"));
  in.model = *octet::bench::model_preset("llama-3.1-8b");
  in.batch_size = int64_t{1} << 50;
  CHECK_THROWS_WITH(octet::bench::make_plan(in), Contains("--batch-size"));
}
